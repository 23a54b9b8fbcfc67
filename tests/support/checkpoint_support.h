#pragma once
// Shared pieces of the real-training checkpoint tests (tests/unit/cpu_*checkpoint_test.cc): the
// tensor-parallel scenario, the rank options that save, resume and initialise, and
// byte-for-byte comparisons.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint_dir.h"
#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"

namespace fullshard::testing {

// A tensor-parallel checkpoint scenario: `model` on `mesh` ({shard}, {shard, tp} or
// {replicate, shard, tp}, tp last), 8-token sequences, `global_batch` sequences per step over
// the data-parallel ranks (NOTE [fp32 tolerance]), Adam with eps 1e-6 and clipping at 1.
inline nlohmann::json tp_checkpoint_scenario(const std::vector<int>& mesh, int global_batch,
                                             nlohmann::json model, int steps, double lr, int seed) {
  TinyOptions o;
  o.mesh = mesh;
  o.seq = 8;
  o.steps = steps;
  const int tp = mesh.size() >= 2 ? mesh.back() : 1;
  int world = 1;
  for (int d : mesh) world *= d;
  o.batch = global_batch * tp / world;
  nlohmann::json j = tiny_scenario_json(o);
  if (mesh.size() == 2) j["fsdp"]["mesh"]["dim_names"] = {"dp_shard", "tp"};
  if (mesh.size() == 3) j["fsdp"]["mesh"]["dim_names"] = {"dp_replicate", "dp_shard", "tp"};
  j["model"] = std::move(model);
  j["training"]["optimizer"] = {{"lr", lr}, {"eps", 1e-6}, {"max_grad_norm", 1.0}};
  j["training"]["seed"] = seed;
  return j;
}

// Rank options that save every `every` steps into `dir` (kAsync: the background writer;
// keep_last: how many checkpoints stay, 0 all).
inline runner::RankOptions saving(const std::string& dir, int every,
                                  CheckpointSaveMode mode = CheckpointSaveMode::kSync,
                                  int keep_last = 0) {
  runner::RankOptions o;
  o.checkpoint_dir = dir;
  o.checkpoint_every = every;
  o.checkpoint_mode = mode;
  o.checkpoint_keep_last = keep_last;
  return o;
}

// Rank options that resume from the newest checkpoint in `dir`.
inline runner::RankOptions resuming(const std::string& dir) {
  runner::RankOptions o;
  o.resume_from = resolve_checkpoint(dir, "--resume");
  return o;
}

// Rank options that start from a consolidated safetensors file.
inline runner::RankOptions init_from(const std::string& file) {
  runner::RankOptions o;
  o.init_from = file;
  return o;
}

// Every full parameter of `a` equals `b`'s to the bit.
inline void expect_bit_identical(const RealRun& a, const RealRun& b) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [fqn, va] : a.params) {
    const auto& vb = b.params.at(fqn);
    ASSERT_EQ(va.size(), vb.size()) << fqn;
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0) << fqn;
  }
}

// Runs `s` 6 steps straight, then 3 steps saving after step 3 into `dir`, then resumes from
// that checkpoint for steps 3-5: every rank's loss of every step and every parameter at the end
// are the straight run's, to the bit. Returns the saving run.
inline RealRun expect_resume_continues_bit_identically(const Scenario& s, const std::string& dir,
                                                       const std::string& what) {
  const RealRun straight = run_real(s, 6);
  RealRun first = run_real(s, 3, saving(dir, 3));
  const RealRun resumed = run_real(s, 6, resuming(dir));
  EXPECT_EQ(resumed.mean_loss.size(), 3u) << what;  // steps 3, 4, 5
  for (size_t k = 0; k < 3 && k < resumed.mean_loss.size(); ++k) {
    EXPECT_EQ(first.mean_loss[k], straight.mean_loss[k]) << what;
    EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[3 + k]) << "step " << 3 + k << " " << what;
    for (size_t r = 0; r < resumed.ranks.size(); ++r)
      EXPECT_EQ(resumed.ranks[r].steps[k].loss, straight.ranks[r].steps[3 + k].loss) << what;
  }
  expect_bit_identical(resumed, straight);
  return first;
}

// The bytes of a file.
inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace fullshard::testing
