// Checkpoints of tensor-parallel runs on the CPU backend (ranks as threads over Gloo): a
// FSDP x tp run resumes bit-identically; its checkpoint loads onto any other mesh (tp 1, tp 4,
// FSDP, HSDP x tp) and continues as unsharded training does; its export is the unsharded
// parameters; `--init-from` into a tp run trains as one rank does from the same file.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/export.h"
#include "core/common/error.h"
#include "runner/init_weights.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/cpu_support.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;
namespace fs = std::filesystem;

// A Llama that splits 1, 2 or 4 ways. `mesh`: {shard}, {shard, tp} or {replicate, shard, tp};
// `global_batch` sequences per step over the data-parallel ranks (NOTE [fp32 tolerance]).
json scenario(std::vector<int> mesh, int global_batch, int steps = 6) {
  return tp_checkpoint_scenario(mesh, global_batch,
                                {{"arch", "llama"},
                                 {"name", "tpckpt"},
                                 {"vocab_size", 256},
                                 {"dim", 8},
                                 {"n_layers", 2},
                                 {"n_heads", 4},
                                 {"n_kv_heads", 4},
                                 {"ffn_dim", 12},
                                 {"max_seq_len", 16}},
                                steps, 1e-3, 7);
}

TEST(CpuTpCheckpoint, ResumeContinuesBitIdentically) {
  for (const auto& mesh : std::vector<std::vector<int>>{{2, 2}, {2, 1, 2}}) {
    TempDir d;
    expect_resume_continues_bit_identically(parse_scenario(scenario(mesh, 4)), d.path(),
                                            "mesh of " + std::to_string(mesh.size()) + " dims");
  }
}

// What a dp_shard 2 x tp 2 save writes: one file per (shard, tp) rank; ColwiseParallel
// weights as strided row pieces, RowwiseParallel ones as column blocks, norms once.
TEST(CpuTpCheckpoint, MetadataDescribesPiecesOfTheGlobalTensor) {
  TempDir d;
  run_real(parse_scenario(scenario({2, 2}, 4)), 1, saving(d.path(), 1));
  CheckpointReader reader(resolve_checkpoint(d.path(), "--resume"));
  reader.verify();
  const CheckpointMetadata& m = reader.metadata();
  EXPECT_EQ(m.tp, 2);
  EXPECT_EQ(m.shard, 2);
  EXPECT_EQ(m.files.size(), 4u);
  const CheckpointTensor* wq = m.find("exp_avg/layers.0.attention.wq.weight");  // [8, 8]
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(wq->shape, (Shape{8, 8}));
  EXPECT_EQ(wq->placements, (std::vector<std::string>{"_StridedShard(dim=0, sf=2)", "Shard(0)"}));
  ASSERT_EQ(wq->chunks.size(), 4u);
  // Sorted by offset: (shard 0, tp 0) rows 0-1, (shard 1, tp 0) rows 2-3, (shard 0, tp 1) rows 4-5,
  // ...
  EXPECT_EQ(wq->chunks[1].file, "shard-00002-of-00004.safetensors");
  EXPECT_EQ(wq->chunks[2].file, "shard-00001-of-00004.safetensors");
  EXPECT_EQ(wq->chunks[2].box, (ChunkBox{{4, 0}, {2, 8}}));
  const CheckpointTensor* w2 =
      m.find("param/layers.1.feed_forward.w2.weight");  // [8, 12], Shard(1)
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->placements, (std::vector<std::string>{"Shard(0)", "Shard(1)"}));
  EXPECT_EQ(w2->chunks[1].box, (ChunkBox{{0, 6}, {4, 6}}));
  const CheckpointTensor* norm = m.find("param/norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->placements, (std::vector<std::string>{"Shard(0)", "Replicate()"}));
  ASSERT_EQ(norm->chunks.size(), 2u);  // tp rank 0 only
  EXPECT_EQ(norm->chunks[1].file, "shard-00002-of-00004.safetensors");
}

// Saved by dp_shard 2 x tp 2 and by FSDP 4, loaded by FSDP 3, 1 rank, tp 4, dp_shard 2 x tp 2
// and HSDP 2 x 1 x tp 2 with the same global batch: each matches one unsharded rank trained
// straight through.
TEST(CpuTpCheckpoint, ReshardOnLoadMatchesUnsharded) {
  const RealRun ref = run_real(parse_scenario(scenario({1}, 12)), 6);
  for (const auto& saved : std::vector<std::vector<int>>{{2, 2}, {4}}) {
    TempDir d;
    run_real(parse_scenario(scenario(saved, 12)), 3, saving(d.path(), 3));
    std::vector<std::vector<int>> loads = {{3}, {1}, {1, 4}, {2, 1, 2}};
    if (saved.size() == 1) loads = {{2, 2}, {1, 4}};
    for (const auto& mesh : loads) {
      const RealRun resumed = run_real(parse_scenario(scenario(mesh, 12)), 6, resuming(d.path()));
      ASSERT_EQ(resumed.mean_loss.size(), 3u);  // steps 3, 4, 5
      std::string where;
      EXPECT_LE(max_violation(resumed, ref, 1e-5, 1e-3, &where), 1.0)
          << where << " (saved on " << saved.size() << " dims, loaded on " << mesh.size() << ")";
      for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(resumed.mean_loss[k], ref.mean_loss[3 + k], 1e-4);
    }
  }
}

// Export of a tp checkpoint is the unsharded parameters, byte for byte; loaded with
// --init-from into a tp run and into one rank the parameters are those bytes, and both train
// alike (within the fp32 tolerance).
TEST(CpuTpCheckpoint, ExportIsTheUnshardedParametersAndInitFromTrainsAsOneRank) {
  TempDir d;
  const json tpj = scenario({2, 2}, 4, 3);
  const RealRun trained = run_real(parse_scenario(tpj), 2, saving(d.path(), 2));
  CheckpointReader reader(resolve_checkpoint(d.path(), "--resume"));
  ExportOptions eo;
  eo.out = d.path() + "/model.safetensors";
  export_safetensors(reader, eo);
  {
    SafetensorsReader st(eo.out);
    for (const auto& [fqn, values] : trained.params) {
      const auto name = export_name("llama", fqn, true).name;
      const auto bytes = st.read_all(name);
      ASSERT_EQ(bytes.size(), values.size() * 4) << name;
      EXPECT_EQ(std::memcmp(bytes.data(), values.data(), bytes.size()), 0) << name;
    }
  }
  for (const auto& mesh : std::vector<std::vector<int>>{{1}, {2, 2}, {1, 4}}) {
    const RealRun loaded = run_real(parse_scenario(scenario(mesh, 4, 3)), 0, init_from(eo.out));
    expect_bit_identical(loaded, trained);
  }
  const RealRun one = run_real(parse_scenario(scenario({1}, 4, 3)), 3, init_from(eo.out));
  for (const auto& mesh : std::vector<std::vector<int>>{{2, 2}, {2, 1, 2}}) {
    const Scenario s = parse_scenario(scenario(mesh, 4, 3));
    runner::validate_init_weights(eo.out, s);
    const RealRun tp = run_real(s, 3, init_from(eo.out));
    std::string where;
    EXPECT_LE(max_violation(tp, one, 1e-5, 1e-3, &where), 1.0) << where;
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(tp.mean_loss[k], one.mean_loss[k], 1e-4);
  }
}

// A token data set read in order (NOTE [Token data sampling]): the ranks of a tp group read one
// batch, so a dp_shard 2 x tp 2 step reads 2 x 2 sequences and the checkpoint says so; a resume
// on FSDP 2 without tp (the same global batch) continues at the next unread sequence.
TEST(CpuTpCheckpoint, ResumeOnTokenDataContinuesAtTheSavedPosition) {
  auto with_data = [](std::vector<int> mesh) {
    json j = scenario(std::move(mesh), 4, 4);
    j["training"]["data"] =
        std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/data/devils-dictionary/train.bin";
    return parse_scenario(j);
  };
  TempDir d;
  const Scenario s = with_data({2, 2});
  const RealRun straight = run_real(s, 4);
  run_real(s, 2, saving(d.path(), 2));
  const CheckpointReader reader(resolve_checkpoint(d.path(), "--resume"));
  ASSERT_TRUE(reader.metadata().data.has_value());
  EXPECT_EQ(reader.metadata().data->samples, 8);
  const RealRun resumed = run_real(s, 4, resuming(d.path()));
  ASSERT_EQ(resumed.mean_loss.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[2 + k]);
  const RealRun fsdp = run_real(with_data({2}), 4, resuming(d.path()));
  ASSERT_EQ(fsdp.mean_loss.size(), 2u);
  for (size_t k = 0; k < 2; ++k)
    EXPECT_NEAR(fsdp.mean_loss[k], straight.mean_loss[2 + k], 1e-4) << "step " << 2 + k;
  std::string where;
  EXPECT_LE(max_violation(fsdp, straight, 1e-5, 1e-3, &where), 1.0) << where;
}

TEST(CpuTpCheckpoint, MismatchesAndDamageAreOneLineErrors) {
  TempDir d;
  run_real(parse_scenario(scenario({2, 2}, 4)), 1, saving(d.path(), 1));
  json other = scenario({2, 2}, 4);
  other["model"]["ffn_dim"] = 16;
  const Scenario so = parse_scenario(other);
  std::string msg = input_error_of([&] { run_real(so, 2, resuming(d.path())); });
  EXPECT_NE(msg.find("--resume: tensor 'param/"), std::string::npos) << msg;
  msg = input_error_of([&] { runner::validate_checkpoint_flags("", 0, d.path(), 2, so); });
  EXPECT_NE(msg.find("[12, 8] in checkpoint"), std::string::npos) << msg;
  // Another RoPE pairing (NOTE [Rotary pairing of weight files] in core/checkpoint/hf_names.h).
  json complex = scenario({2, 2}, 4);
  complex["model"]["implementation"] = {{"rope", "complex"}};
  msg = input_error_of(
      [&] { runner::validate_checkpoint_flags("", 0, d.path(), 2, parse_scenario(complex)); });
  EXPECT_NE(msg.find("--resume: checkpoint '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("RoPE pairing q / k columns by halves"), std::string::npos) << msg;
  // A rank file cut short: its size no longer matches metadata.json (one rank reads every file).
  const std::string folder = resolve_checkpoint(d.path(), "--resume");
  const fs::path f = fs::path(folder) / "shard-00003-of-00004.safetensors";
  fs::resize_file(f, fs::file_size(f) - 3);
  msg = input_error_of([&] { run_real(parse_scenario(scenario({1}, 4)), 2, resuming(d.path())); });
  EXPECT_NE(msg.find("shard-00003-of-00004.safetensors: tensor '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(truncated?)"), std::string::npos) << msg;
  // Overlapping pieces in metadata.json.
  const fs::path meta = fs::path(folder) / "metadata.json";
  json j;
  std::ifstream(meta) >> j;
  for (auto& t : j["tensors"])
    if (t["name"] == "param/layers.0.attention.wo.weight") t["chunks"][1]["offsets"][1] = 2;
  std::ofstream(meta) << j.dump();
  msg = input_error_of([&] { CheckpointReader r(folder); });
  EXPECT_NE(msg.find("'param/layers.0.attention.wo.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlaps chunk"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fullshard
