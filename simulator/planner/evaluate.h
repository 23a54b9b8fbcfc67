#pragma once
// Exact evaluation of one candidate program: what simulate_scenario says about its memory
// under both allocator settings (expandable segments off and on) and its timing.
//
// NOTE [One recording per program]: expandable_segments changes only the allocator, never
// what the host program issues, and the simulator's timing never looks at addresses, so one
// recording (expandable segments, unlimited capacity) gives the timing of both settings and
// the request sequence whose replays (NOTE [Allocation replay]) give their memory at the
// device's capacity, and -- for a setting that runs out -- the reserved bytes it would need.
#include <array>
#include <cstdint>

#include "core/scenario/scenario.h"

namespace fullshard::planner {

struct MemoryOutcome {
  bool out_of_memory = false;        // some rank class runs out at the device's capacity
  uint64_t peak_reserved_bytes = 0;  // at capacity (up to the failing allocation when OOM)
  uint64_t peak_allocated_bytes = 0;
  uint64_t needed_reserved_bytes =
      0;  // peak reserved with unlimited capacity (= peak when it fits)
};

struct ProgramEvaluation {
  std::array<MemoryOutcome, 2> memory;  // [0] expandable segments off, [1] on
  // Timing of the completed program (both settings), as simulate_scenario reports it.
  double step_time_s = 0;
  double compute_s = 0;
  double exposed_comm_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  bool problems = false;  // the simulation found protocol problems or a hang (never expected)
  // NOTE [Host memory per node] (simulator/host_memory.h): the fullest node's pinned host bytes
  // and how far they exceed the node's host memory (0: within it, or the profile gives none).
  uint64_t host_bytes_per_node = 0;
  uint64_t host_over_bytes = 0;
};

// `s`'s own expandable_segments setting is ignored: both are evaluated.
ProgramEvaluation evaluate_program(const Scenario& s);

}  // namespace fullshard::planner
