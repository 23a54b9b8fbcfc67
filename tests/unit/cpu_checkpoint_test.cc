// Sharded checkpoints in real training on the CPU backend (ranks as threads over Gloo):
// resuming continues bit-identically, resharding onto another world size or mesh matches
// unsharded training, and a checkpoint of another model is refused naming the tensor.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/common/error.h"
#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "fullshard-cpuckpt-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// NOTE [fp32 tolerance] (tests/property/cpu_training_prop_test.cc): eps 1e-6, lr 1e-3.
json scenario(std::vector<int> mesh, int batch, int steps = 6) {
  TinyOptions o;
  o.mesh = std::move(mesh);
  o.batch = batch;
  o.seq = 8;
  o.steps = steps;
  json j = tiny_scenario_json(o);
  j["model"] = {{"arch", "llama"}, {"name", "ckpt"}, {"vocab_size", 256}, {"dim", 8}, {"n_layers", 2},
                {"n_heads", 2},    {"n_kv_heads", 1}, {"ffn_dim", 12},     {"max_seq_len", 16}};
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", 1.0}};
  j["training"]["seed"] = 7;
  return j;
}

runner::RankOptions saving(const std::string& dir, int every) {
  runner::RankOptions o;
  o.checkpoint_dir = dir;
  o.checkpoint_every = every;
  return o;
}
runner::RankOptions resuming(const std::string& dir) {
  runner::RankOptions o;
  o.resume_from = resolve_checkpoint(dir, "--resume");
  return o;
}

void expect_bit_identical(const RealRun& a, const RealRun& b) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [fqn, va] : a.params) {
    const auto& vb = b.params.at(fqn);
    ASSERT_EQ(va.size(), vb.size()) << fqn;
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0) << fqn;
  }
}

TEST(CpuCheckpoint, ResumeContinuesBitIdentically) {
  TempDir d;
  const Scenario s = parse_scenario(scenario({2}, 2));
  const RealRun straight = run_real(s, 6);
  const RealRun first = run_real(s, 3, saving(d.path(), 3));
  ASSERT_TRUE(fs::exists(fs::path(d.path()) / "step-00000003" / "metadata.json"));
  const RealRun resumed = run_real(s, 6, resuming(d.path()));
  ASSERT_EQ(resumed.mean_loss.size(), 3u);  // steps 3, 4, 5
  EXPECT_EQ(resumed.ranks[0].steps[0].step, 3);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(first.mean_loss[k], straight.mean_loss[k]);
    EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[3 + k]) << "step " << 3 + k;  // bit for bit
    for (int r = 0; r < 2; ++r) EXPECT_EQ(resumed.ranks[r].steps[k].loss, straight.ranks[r].steps[3 + k].loss);
  }
  expect_bit_identical(resumed, straight);
}

TEST(CpuCheckpoint, HsdpResumeContinuesBitIdentically) {
  TempDir d;
  const Scenario s = parse_scenario(scenario({2, 2}, 1, 4));
  const RealRun straight = run_real(s, 4);
  run_real(s, 2, saving(d.path(), 2));
  // Only replica 0 writes: two shard files for four ranks.
  EXPECT_TRUE(fs::exists(fs::path(d.path()) / "step-00000002" / "shard-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(d.path()) / "step-00000002" / "shard-00002-of-00004.safetensors"));
  const RealRun resumed = run_real(s, 4, resuming(d.path()));
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[2 + k]);
  expect_bit_identical(resumed, straight);
}

// Saved by 2 ranks (batch 3 each), resumed on 3 ranks (batch 2) and on an HSDP 2x2 mesh...
// with the same global batch of 6: both match one unsharded rank trained 6 steps.
TEST(CpuCheckpoint, ReshardOnLoadMatchesUnsharded) {
  TempDir d;
  const RealRun ref = run_real(parse_scenario(scenario({1}, 6)), 6);
  run_real(parse_scenario(scenario({2}, 3)), 3, saving(d.path(), 3));
  for (const auto& [mesh, batch] : std::vector<std::pair<std::vector<int>, int>>{{{3}, 2}, {{2, 3}, 1}, {{1}, 6}}) {
    const RealRun resumed = run_real(parse_scenario(scenario(mesh, batch)), 6, resuming(d.path()));
    std::string where;
    EXPECT_LE(max_violation(resumed, ref, 1e-5, 1e-3, &where), 1.0) << where << " (mesh of " << mesh.size() << " dims)";
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(resumed.mean_loss[k], ref.mean_loss[3 + k], 1e-4);
  }
}

TEST(CpuCheckpoint, ACheckpointOfAnotherModelIsRefusedNamingTheTensor) {
  TempDir d;
  run_real(parse_scenario(scenario({2}, 2)), 1, saving(d.path(), 1));
  json other = scenario({2}, 2);
  other["model"]["ffn_dim"] = 16;
  try {
    run_real(parse_scenario(other), 2, resuming(d.path()));
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--resume: tensor 'param/"), std::string::npos) << msg;
    EXPECT_NE(msg.find("in the scenario"), std::string::npos) << msg;
  }
  json seed = scenario({2}, 2);
  seed["training"]["seed"] = 8;
  try {
    run_real(parse_scenario(seed), 2, resuming(d.path()));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.seed 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fullshard
