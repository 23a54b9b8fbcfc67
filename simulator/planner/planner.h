#pragma once
// `fullshard plan`: which settings fit on N GPUs, and which runs fastest (docs/planner.md).
//
// NOTE [Branch and bound]: every candidate gets lower bounds on its peak memory and step time
// from 2-block proxies (NOTE [Block bounds]). Candidates whose memory bound exceeds the usable
// memory cannot fit and are not simulated. The rest are simulated in order of their best
// possible tokens/s per GPU (tokens per step / step-time bound); once that upper bound falls
// below the best fitting candidate simulated so far, no later candidate can win, and the
// search stops. So the winner -- and every candidate that could tie or beat it -- is exactly
// what simulate_scenario says; tests/unit/planner_prune_test.cc compares with an exhaustive
// search. Simulations run on several threads; a candidate is reported as simulated only when
// its upper bound reaches the final best, which every schedule simulates, so the report does
// not depend on thread timing.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario/scenario.h"
#include "simulator/planner/search_space.h"

namespace fullshard::planner {

struct PlanOptions {
  Scenario base;  // model, hardware (nodes x gpus_per_node = space.gpus), seq_len, optimizer
  SpaceOptions space;
  double headroom = 0;  // fraction of the allocator's capacity to keep free, in [0, 1)
  bool prune = true;    // false: simulate every candidate
  int threads = 0;      // 0: one per hardware thread
  // (done, total, phase): "bounds" while proxies run, "simulate" while candidates do.
  std::function<void(size_t, size_t, const char*)> progress;
};

enum class Verdict : uint8_t {
  kSimulated,    // exact: simulate_scenario's figures
  kMemoryBound,  // not simulated: its memory lower bound exceeds the usable memory
  kTimeBound,    // not simulated (or not reported as such): cannot beat the best
};
const char* verdict_name(Verdict v);  // "simulated", "memory_bound", "time_bound"

struct ConfigResult {
  Candidate candidate;
  Verdict verdict = Verdict::kSimulated;
  bool fits =
      false;  // exact for kSimulated; false for kMemoryBound; unknown (false) for kTimeBound
  bool out_of_memory = false;         // kSimulated: ran out at the device's capacity
  uint64_t peak_reserved_bytes = 0;   // kSimulated: at capacity; bounds: the memory lower bound
  uint64_t peak_allocated_bytes = 0;  // kSimulated only
  // Reserved bytes it needs (unlimited capacity); for kMemoryBound a lower bound.
  uint64_t needed_bytes = 0;
  // kSimulated: exact; kTimeBound: step time lower bound and tokens/s upper bound.
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double compute_s = 0;
  double exposed_comm_s = 0;
  double bound_step_time_s = 0;  // the lower bounds (0 when not computed)
  uint64_t bound_peak_bytes = 0;
  // Bytes over the usable memory (0 when it fits or is kTimeBound): exact, or at least this
  // for kMemoryBound.
  uint64_t over_bytes = 0;
  // kSimulated: the fullest node's pinned host bytes (CPU offload, checkpoint staging) and how
  // far they exceed PlanResult::host_memory_bytes (0: within it, or not checked). A
  // configuration over it does not fit (NOTE [Host memory per node]).
  uint64_t host_bytes_per_node = 0;
  uint64_t host_over_bytes = 0;
  // Fits the GPU but not the node's host memory.
  bool over_host_only() const { return host_over_bytes > 0 && over_bytes == 0 && !out_of_memory; }
};

struct PlanResult {
  std::vector<ConfigResult>
      configs;  // rank order: fitting by tokens/s, then time-bound, then the rest by overflow
  size_t evaluated = 0;  // candidates with a verdict (all of them)
  size_t simulated = 0;  // reported as kSimulated
  size_t memory_pruned = 0, time_pruned = 0;
  size_t programs_simulated = 0;   // full simulations run (a program covers expandable off and on)
  size_t proxy_simulations = 0;    // 2-block proxy simulations run for the bounds
  bool pruning = false;            // whether bounds were used
  uint64_t capacity_bytes = 0;     // the caching allocator's capacity per GPU
  uint64_t usable_bytes = 0;       // capacity x (1 - headroom)
  uint64_t host_memory_bytes = 0;  // host DRAM per node (the profile's; 0: not checked)
  bool best_fits() const { return !configs.empty() && configs.front().fits; }
};

PlanResult plan(const PlanOptions& options);

}  // namespace fullshard::planner
