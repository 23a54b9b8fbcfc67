// Sharded checkpoints in real training on the CPU backend (ranks as threads over Gloo):
// resuming continues bit-identically, resharding onto another world size or mesh matches
// unsharded training, and a checkpoint of another model is refused naming the tensor.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/export.h"
#include "core/common/error.h"
#include "runner/init_weights.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;
namespace fs = std::filesystem;

// NOTE [fp32 tolerance] (tests/property/cpu_training_prop_test.cc): eps 1e-6, lr 1e-3.
json scenario(std::vector<int> mesh, int batch, int steps = 6) {
  TinyOptions o;
  o.mesh = std::move(mesh);
  o.batch = batch;
  o.seq = 8;
  o.steps = steps;
  json j = tiny_scenario_json(o);
  j["model"] = {{"arch", "llama"}, {"name", "ckpt"}, {"vocab_size", 256},
                {"dim", 8},        {"n_layers", 2},  {"n_heads", 2},
                {"n_kv_heads", 1}, {"ffn_dim", 12},  {"max_seq_len", 16}};
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", 1.0}};
  j["training"]["seed"] = 7;
  return j;
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
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(resumed.ranks[r].steps[k].loss, straight.ranks[r].steps[3 + k].loss);
  }
  expect_bit_identical(resumed, straight);
}

TEST(CpuCheckpoint, HsdpResumeContinuesBitIdentically) {
  TempDir d;
  const Scenario s = parse_scenario(scenario({2, 2}, 1, 4));
  const RealRun straight = run_real(s, 4);
  run_real(s, 2, saving(d.path(), 2));
  // Only replica 0 writes: two shard files for four ranks.
  EXPECT_TRUE(
      fs::exists(fs::path(d.path()) / "step-00000002" / "shard-00001-of-00002.safetensors"));
  EXPECT_FALSE(
      fs::exists(fs::path(d.path()) / "step-00000002" / "shard-00002-of-00004.safetensors"));
  const RealRun resumed = run_real(s, 4, resuming(d.path()));
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[2 + k]);
  expect_bit_identical(resumed, straight);
}

// NOTE [Asynchronous save] (runner/checkpoint_saver.h): the same run saved asynchronously writes
// the same bytes as the synchronous save (the staged copy is the state at the checkpoint step,
// although training went on while it was written), and a resume from it continues bit-identically.
// Each rank staged exactly its shards: parameters and both AdamW states.
TEST(CpuCheckpoint, AsyncSaveWritesTheSameBytesAndResumesBitIdentically) {
  TempDir sync_dir, async_dir;
  const Scenario s = parse_scenario(scenario({2}, 2));
  const RealRun straight = run_real(s, 6);
  const RealRun sync_run = run_real(s, 4, saving(sync_dir.path(), 2));
  const RealRun async_run = run_real(s, 4, saving(async_dir.path(), 2, CheckpointSaveMode::kAsync));
  for (size_t k = 0; k < 4; ++k)
    EXPECT_EQ(async_run.mean_loss[k], straight.mean_loss[k]);  // training unchanged
  for (const char* step : {"step-00000002", "step-00000004"})
    for (const char* f : {"metadata.json", "shard-00000-of-00002.safetensors",
                          "shard-00001-of-00002.safetensors"}) {
      const fs::path a = fs::path(sync_dir.path()) / step / f,
                     b = fs::path(async_dir.path()) / step / f;
      ASSERT_TRUE(fs::exists(b)) << b;
      EXPECT_EQ(file_bytes(a), file_bytes(b)) << step << "/" << f;
    }
  for (int r = 0; r < 2; ++r) {
    const runner::CheckpointSaveStats& st = async_run.ranks[r].checkpoint;
    EXPECT_EQ(st.saves, 2);
    EXPECT_EQ(st.mode, CheckpointSaveMode::kAsync);
    uint64_t shard_bytes =
        0;  // fp32 parameter rows of the rank, three times (param, exp_avg, exp_avg_sq)
    for (const auto& [fqn, v] : async_run.ranks[r].local_params) shard_bytes += 3 * v.size() * 4;
    EXPECT_EQ(st.staging_bytes, shard_bytes) << "rank " << r;
    EXPECT_GE(st.background_s, st.hidden_s);
    EXPECT_EQ(sync_run.ranks[r].checkpoint.staging_bytes,
              0u);  // a synchronous save stages nothing beyond its write
  }
  const RealRun resumed = run_real(s, 6, resuming(async_dir.path()));
  ASSERT_EQ(resumed.mean_loss.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[4 + k]);
  expect_bit_identical(resumed, straight);
}

// NOTE [Checkpoint retention] in a run: saving every step with --keep-last 2 leaves the two
// newest, in both modes, and the older of them resumes bit-identically.
TEST(CpuCheckpoint, KeepLastLeavesTheNewestCheckpoints) {
  const Scenario s = parse_scenario(scenario({2}, 2));
  const RealRun straight = run_real(s, 6);
  for (CheckpointSaveMode mode : {CheckpointSaveMode::kSync, CheckpointSaveMode::kAsync}) {
    TempDir d;
    run_real(s, 5, saving(d.path(), 1, mode, 2));
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d.path()))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}))
        << checkpoint_save_mode_name(mode);
    runner::RankOptions o;
    o.resume_from = (fs::path(d.path()) / "step-00000004").string();
    const RealRun rest = run_real(s, 6, o);
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(rest.mean_loss[k], straight.mean_loss[4 + k]);
    expect_bit_identical(rest, straight);
  }
}

// Saved by 2 ranks (batch 3 each), resumed on 3 ranks (batch 2) and on an HSDP 2x2 mesh...
// with the same global batch of 6: both match one unsharded rank trained 6 steps.
TEST(CpuCheckpoint, ReshardOnLoadMatchesUnsharded) {
  TempDir d;
  const RealRun ref = run_real(parse_scenario(scenario({1}, 6)), 6);
  run_real(parse_scenario(scenario({2}, 3)), 3, saving(d.path(), 3));
  for (const auto& [mesh, batch] :
       std::vector<std::pair<std::vector<int>, int>>{{{3}, 2}, {{2, 3}, 1}, {{1}, 6}}) {
    const RealRun resumed = run_real(parse_scenario(scenario(mesh, batch)), 6, resuming(d.path()));
    std::string where;
    EXPECT_LE(max_violation(resumed, ref, 1e-5, 1e-3, &where), 1.0)
        << where << " (mesh of " << mesh.size() << " dims)";
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

// Export -> --init-from round trip: the weights a 2-rank run ended with, exported with
// Hugging Face names (GPT-2: Conv1D weights transposed; sharded layout for Llama), loaded by a
// 3-rank run, are its parameters byte for byte.
TEST(CpuCheckpoint, ExportThenInitFromLeavesEveryByteUnchanged) {
  for (const bool gpt2 : {false, true}) {
    TempDir d;
    json j = scenario({2}, 2, 2);
    if (gpt2)
      j["model"] = {{"arch", "gpt2"}, {"name", "g"},  {"vocab_size", 256}, {"dim", 8},
                    {"n_layers", 2},  {"n_heads", 2}, {"ffn_dim", 12},     {"max_seq_len", 16}};
    const RealRun trained = run_real(parse_scenario(j), 2, saving(d.path(), 2));
    CheckpointReader reader(resolve_checkpoint(d.path(), "--resume"));
    ExportOptions eo;
    eo.out = d.path() + (gpt2 ? "/model.safetensors" : "/hf");
    eo.max_shard_bytes = gpt2 ? 0 : 4096;
    export_safetensors(reader, eo);
    runner::RankOptions o;
    o.init_from = eo.out;
    json three = j;
    three["fsdp"]["mesh"]["shape"] = {3};
    three["hardware"]["gpus_per_node"] = 3;
    const RealRun loaded = run_real(parse_scenario(three), 0, o);
    expect_bit_identical(loaded, trained);
    runner::validate_init_weights(eo.out, parse_scenario(three));
    json other = three;
    other["model"]["ffn_dim"] = 16;
    try {
      runner::validate_init_weights(eo.out, parse_scenario(other));
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(gpt2 ? "c_fc.weight': is [8, 12]"
                                                : "gate_proj.weight': is [12, 8]"),
                std::string::npos)
          << e.what();
    }
  }
}

// NOTE [Crash consistency test]: a process training 2 ranks (threads over Gloo) and saving
// after every step, keeping the last 2 (NOTE [Checkpoint retention]), is SIGKILLed after a
// random delay (seeded) within its run, `trials` times; most kills land inside a save, since
// saving (copies, writes, fsyncs, deletions) takes most of each step of this small model.
// Whatever the moment, the folder must hold either no committed checkpoint (killed before the
// first commit) or one that verifies and, resumed, continues bit-identically to the
// uninterrupted run. Run for the synchronous and the asynchronous save (NOTE [Asynchronous save]).
void crash_test(CheckpointSaveMode mode, int trials) {
  constexpr int kSteps = 4;
  const Scenario s = parse_scenario(scenario({2}, 1, kSteps));
  const RealRun straight = run_real(s, kSteps);
  auto run_child = [&](const std::string& dir, int64_t kill_after_us) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        run_real(s, kSteps, saving(dir, 1, mode, 2));
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    if (kill_after_us >= 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(kill_after_us));
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  // How long an uninterrupted child takes: the kills are spread over that.
  int64_t full_us = 0;
  {
    TempDir d;
    const auto t0 = std::chrono::steady_clock::now();
    const int status = run_child(d.path(), -1);
    full_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    int folders = 0;
    for (const auto& e : fs::directory_iterator(d.path())) folders += e.is_directory();
    ASSERT_EQ(folders, 2);  // --keep-last 2
  }
  std::mt19937_64 rng(mode == CheckpointSaveMode::kAsync ? 20261124 : 20261121);
  int none_committed = 0, mid_save = 0, mid_prune = 0, resumed = 0;
  for (int trial = 0; trial < trials; ++trial) {
    TempDir d;
    run_child(d.path(), std::uniform_int_distribution<int64_t>(0, full_us)(rng));
    // Evidence of a save cut short: a step folder without metadata.json, or a temporary file;
    // of a deletion cut short: a .deleting-* folder.
    bool cut = false, pruning = false;
    if (fs::exists(d.path()))
      for (const auto& e : fs::directory_iterator(d.path())) {
        const std::string n = e.path().filename().string();
        pruning = pruning || n.rfind(kDeletingPrefix, 0) == 0;
        if (n.rfind("step-", 0) != 0) continue;
        cut = cut || !fs::exists(e.path() / "metadata.json");
        for (const auto& f : fs::directory_iterator(e.path()))
          cut = cut || f.path().filename().string().find(".tmp-") != std::string::npos;
      }
    mid_save += cut;
    mid_prune += pruning;
    std::string folder;
    try {
      folder = resolve_checkpoint(d.path(), "--resume");
    } catch (const InputError& e) {
      ASSERT_NE(std::string(e.what()).find("no committed checkpoint"), std::string::npos)
          << e.what();
      ++none_committed;
      continue;
    }
    CheckpointReader reader(folder);
    reader.verify();
    const int64_t next = reader.metadata().next_step;
    if (next >= kSteps) continue;  // the last save committed: nothing left to train
    runner::RankOptions o;
    o.resume_from = folder;
    const RealRun rest = run_real(s, kSteps, o);
    for (size_t k = 0; k < rest.mean_loss.size(); ++k)
      ASSERT_EQ(rest.mean_loss[k], straight.mean_loss[static_cast<size_t>(next) + k])
          << "trial " << trial;
    expect_bit_identical(rest, straight);
    ++resumed;
  }
  std::printf(
      "crash test (%s): %d trials over %.3f s runs: %d cut a save short, %d a deletion, %d before "
      "the first "
      "commit, %d resumed\n",
      checkpoint_save_mode_name(mode), trials, full_us * 1e-6, mid_save, mid_prune, none_committed,
      resumed);
  EXPECT_GE(mid_save, trials / 10);  // the kills did land inside saves
  EXPECT_GE(resumed, trials / 10);
}

TEST(CpuCheckpoint, KilledDuringSavesAlwaysLeavesALoadableCheckpoint) {
  crash_test(CheckpointSaveMode::kSync, 50);
}
TEST(CpuCheckpoint, KilledDuringAsyncSavesAlwaysLeavesALoadableCheckpoint) {
  crash_test(CheckpointSaveMode::kAsync, 30);
}

}  // namespace
}  // namespace fullshard
