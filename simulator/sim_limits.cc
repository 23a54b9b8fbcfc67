#include "simulator/sim_limits.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/common/error.h"
#include "simulator/simulate.h"

namespace fullshard::sim {

// NOTE [Simulation limits]: simulating is linear in what is played (host-program instructions
// of each played program and step) and in the world size once rank classes are computed in
// linear time (NOTE [Rank classes in linear time], simulate.cc); training.steps does not count
// beyond kMaxSimulatedSteps (NOTE [Steady state], extrapolate.cc). The instruction
// count of a program is estimated from above before anything is built: per micro-batch and
// layer (forward, backward, recomputation, the FSDP collectives and copies), per layer and
// step (optimizer, clipping), and fixed parts. The constants are the largest measured per
// part over the shipped models and policies (docs/scenario-format.md, "Limits"), with margin,
// so the estimate is never below the recorded count (tests/unit/sim_limits_test.cc checks).
namespace {
// Measured (tiny models, 2 and 4 layers, 1 and 2 micro-batches, 1 and 2 steps; see
// docs/scenario-format.md "Limits"): per layer and micro-batch 164 (units root) to 206
// (blocks), +54 with activation checkpointing, +54 with CPU offload; per micro-batch 74-88;
// per layer and step 9-26, +45 with CPU offload; per step 27-43; per layer at init 54-72;
// init 19-25. The constants add margin over the largest.
constexpr uint64_t kPerLayerMicroBatch = 230;
constexpr uint64_t kPerLayerMicroBatchCheckpointed = 70;
constexpr uint64_t kPerLayerMicroBatchOffloaded = 70;
constexpr uint64_t kPerMicroBatch = 120;
constexpr uint64_t kPerLayerStep = 40;
constexpr uint64_t kPerLayerStepOffloaded = 60;
constexpr uint64_t kPerStep = 80;
constexpr uint64_t kPerLayerInit = 90;
constexpr uint64_t kInit = 50;

uint64_t sat_mul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
}  // namespace

uint64_t estimate_program_instructions(const Scenario& s, int played_steps) {
  const uint64_t layers = static_cast<uint64_t>(std::max<int64_t>(0, s.model.n_layers));
  const uint64_t micro = static_cast<uint64_t>(std::max(1, s.training.grad_accum_steps));
  const bool checkpointed = s.training.activation_checkpointing.mode != RecomputeMode::kNone;
  const bool offloaded = s.fsdp.cpu_offload;
  const uint64_t layer_micro = kPerLayerMicroBatch +
                               (checkpointed ? kPerLayerMicroBatchCheckpointed : 0) +
                               (offloaded ? kPerLayerMicroBatchOffloaded : 0);
  const uint64_t layer_step = kPerLayerStep + (offloaded ? kPerLayerStepOffloaded : 0);
  const uint64_t per_micro = sat_add(sat_mul(layers, layer_micro), kPerMicroBatch);
  const uint64_t per_step =
      sat_add(sat_add(sat_mul(micro, per_micro), sat_mul(layers, layer_step)), kPerStep);
  const uint64_t init = sat_add(sat_mul(layers, kPerLayerInit), kInit);
  return sat_add(init, sat_mul(static_cast<uint64_t>(std::max(1, played_steps)), per_step));
}

SimulationSize estimate_simulation_size(const Scenario& s, int played_steps, bool all_ranks) {
  const int64_t world = s.world_size();
  if (world > kMaxSimulatedWorld)
    throw InputError("hardware",
                     fmt::format("makes a world of {} ranks (nodes x gpus_per_node), above the "
                                 "simulator's limit of {}",
                                 world, kMaxSimulatedWorld),
                     fmt::format("simulate at most {} ranks (docs/scenario-format.md, \"Limits\")",
                                 kMaxSimulatedWorld));
  if (s.model.n_layers > kMaxSimulatedLayers)
    throw InputError("model.n_layers",
                     fmt::format("is {}, above the simulator's limit of {}", s.model.n_layers,
                                 kMaxSimulatedLayers),
                     fmt::format("use at most {} layers (docs/scenario-format.md, \"Limits\")",
                                 kMaxSimulatedLayers));
  SimulationSize z;
  z.recorded_programs = rank_classes(s).size();
  bool uneven = s.training.uneven_batch();
  for (const auto& [rank, speed] : s.hardware.rank_speed) uneven |= speed != 1.0;
  z.played_programs = all_ranks || uneven ? static_cast<uint64_t>(world) : z.recorded_programs;
  const uint64_t per = estimate_program_instructions(s, played_steps);
  z.recorded_instructions = sat_mul(z.recorded_programs, per);
  z.played_instructions = sat_mul(z.played_programs, per);
  return z;
}

void check_simulation_limits(const Scenario& s, int played_steps, bool all_ranks) {
  const SimulationSize z = estimate_simulation_size(s, played_steps, all_ranks);
  const std::string what =
      fmt::format("model.n_layers {} x training.grad_accum_steps {} x {} simulated steps",
                  s.model.n_layers, s.training.grad_accum_steps, played_steps);
  if (z.recorded_instructions > kMaxRecordedInstructions)
    throw InputError(
        "training.grad_accum_steps",
        fmt::format("with {} over {} rank class(es) needs about {} recorded host-program "
                    "instructions, above the simulator's limit of {}",
                    what, z.recorded_programs, z.recorded_instructions, kMaxRecordedInstructions),
        "use fewer layers or micro-batches (docs/scenario-format.md, \"Limits\")");
  if (z.played_instructions > kMaxPlayedInstructions)
    throw InputError(
        all_ranks ? "--ranks" : "training.grad_accum_steps",
        fmt::format("with {} over {} simulated rank programs needs about {} host-program "
                    "instructions, above the simulator's limit of {}",
                    what, z.played_programs, z.played_instructions, kMaxPlayedInstructions),
        all_ranks
            ? "use --ranks classes, or fewer ranks or layers (docs/scenario-format.md, \"Limits\")"
            : "use fewer ranks, layers or micro-batches (docs/scenario-format.md, \"Limits\")");
}

bool within_simulation_limits(const Scenario& s, int played_steps, bool all_ranks) {
  try {
    check_simulation_limits(s, played_steps, all_ranks);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

}  // namespace fullshard::sim
