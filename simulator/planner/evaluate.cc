#include "simulator/planner/evaluate.h"

#include <algorithm>
#include <limits>

#include "simulator/planner/allocation_replay.h"
#include "simulator/simulate.h"

namespace fullshard::planner {

ProgramEvaluation evaluate_program(const Scenario& candidate) {
  Scenario s = candidate;
  const AllocatorOptions device = s.hardware.allocator;
  s.hardware.allocator.expandable_segments = true;
  s.hardware.allocator.capacity_bytes = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<AllocRequest>> requests;
  sim::SimulateOptions o;
  o.checks = false;
  o.memory_timeline = false;  // not read
  o.play_checkpoint = false;  // priced by the closed form (NOTE [Checkpoint cost])
  o.on_played = [&](const sim::PlayedRun& run) {
    for (const sim::Program& p : run.programs) requests.push_back(device_requests(p));
  };
  const sim::SimulationReport rep = sim::simulate_scenario(s, o);
  ProgramEvaluation ev;
  // training.checkpoint: the save's amortised cost is part of the step (NOTE [Checkpoint cost]).
  ev.step_time_s = rep.step_time_with_checkpoint_s();
  const double slowdown = ev.step_time_s > 0 ? rep.step_time_s / ev.step_time_s : 1;
  // The step's parts from the same step as step_time_s (the slowest rank's last): the run's
  // per-step means include the first step, which can be longer (with CPU offload, compute
  // alone came out above the last step's time and the rest of the step negative).
  ev.compute_s = rep.last_step_rank >= 0 ? rep.last_step.compute_s : rep.compute_s;
  ev.exposed_comm_s = rep.last_step_rank >= 0 ? rep.last_step.exposed_comm_s : rep.exposed_comm_s;
  ev.tokens_per_s_per_gpu = rep.tokens_per_s_per_gpu * slowdown;
  ev.mfu = rep.mfu * slowdown;
  ev.problems = !rep.problems.empty();
  ev.host_bytes_per_node = rep.peak_host_bytes_per_node;
  if (rep.host_out_of_memory)
    ev.host_over_bytes = rep.peak_host_bytes_per_node - rep.host_memory_bytes;
  for (int e = 0; e < 2; ++e) {
    AllocatorOptions ao = device;
    ao.expandable_segments = e == 1;
    MemoryOutcome& m = ev.memory[e];
    for (const auto& reqs : requests) {
      ReplayResult r = replay(reqs, ao);
      uint64_t needed = r.peak_reserved_bytes;
      if (r.out_of_memory) {
        AllocatorOptions unlimited = ao;
        unlimited.capacity_bytes = std::numeric_limits<uint64_t>::max();
        needed = replay(reqs, unlimited).peak_reserved_bytes;
        m.out_of_memory = true;
      }
      m.peak_reserved_bytes = std::max(m.peak_reserved_bytes, r.peak_reserved_bytes);
      m.peak_allocated_bytes = std::max(m.peak_allocated_bytes, r.peak_allocated_bytes);
      m.needed_reserved_bytes = std::max(m.needed_reserved_bytes, needed);
    }
  }
  return ev;
}

}  // namespace fullshard::planner
