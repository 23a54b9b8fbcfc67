#pragma once
// Shared pieces of the real-training property tests (tests/property/cpu_*_prop_test.cc): the
// tensor-parallel meshes they draw, the single-rank reference job, the root kept unsharded for
// the chunked loss, and the check that the simulator's memory prediction equals what the CPU
// backend measured, to the byte.
#include <rapidcheck.h>

#include <nlohmann/json.hpp>

#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"

namespace fullshard::testing {

// [replicate, shard, tp] with at most 8 ranks (threads), as a JSON mesh: 2-D (dp_shard, tp)
// or 3-D (dp_replicate, dp_shard, tp). Sets the world size and the shard degree drawn.
inline nlohmann::json tp_mesh(int tp, int* world, int* shard) {
  const int replicate = *rc::gen::element(1, 2);
  *shard = *rc::gen::inRange(1, 4);
  RC_PRE(replicate * *shard * tp <= 8);
  *world = replicate * *shard * tp;
  if (replicate == 1 && *rc::gen::arbitrary<bool>())
    return {{"shape", {*shard, tp}}, {"dim_names", {"dp_shard", "tp"}}};
  return {{"shape", {replicate, *shard, tp}}, {"dim_names", {"dp_replicate", "dp_shard", "tp"}}};
}

// The same job on one rank: the whole global batch (every one of the `dp` data-parallel ranks'),
// no sharding, no per-unit settings.
inline nlohmann::json unsharded_job(nlohmann::json j, int dp) {
  j["fsdp"]["mesh"] = {{"shape", {1}}};
  j["fsdp"].erase("reshard_after_forward");
  j["fsdp"].erase("per_unit");
  j["fsdp"]["cpu_offload"] = false;
  j["training"]["batch_per_rank"] = j["training"]["batch_per_rank"].get<int>() * dp;
  j["hardware"]["gpus_per_node"] = 1;
  return j;
}

// The chunked loss calls the output projection after the root's forward: with the output in
// the root unit, the root must not reshard after forward (a parse error otherwise).
inline void keep_root_unsharded_for_chunks(nlohmann::json& j) {
  if (j["model"].value("implementation", nlohmann::json::object()).value("loss", "") != "chunked" ||
      j["fsdp"].value("units", "") == "embed_blocks_head")
    return;
  j["fsdp"]["per_unit"]["root"] = {{"reshard_after_forward", false}};
}

// Simulates every rank of `s`, runs it for real, and asserts each rank's peak allocated and
// reserved bytes equal the prediction (a rapidcheck property's assertion).
inline void predicted_peaks_equal_measured(const Scenario& s) {
  sim::SimulateOptions so;
  so.all_ranks = true;
  const sim::SimulationReport pred = sim::simulate_scenario(s, so);
  if (!pred.ok()) RC_FAIL(problems_text(pred));
  const RealRun real = run_real(s);
  for (const auto& c : pred.classes)
    for (int r : c.ranks) {
      RC_ASSERT(real.ranks[r].report.peak_allocated_bytes == c.peak_allocated_bytes);
      RC_ASSERT(real.ranks[r].report.peak_reserved_bytes == c.peak_reserved_bytes);
    }
}

}  // namespace fullshard::testing
