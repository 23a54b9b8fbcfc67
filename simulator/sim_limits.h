#pragma once
// What `fullshard simulate` refuses up front: scenarios whose simulation could not finish
// within the time and memory bound of docs/scenario-format.md ("Limits"). Each refusal is an
// InputError naming the field, the figure and the limit (NOTE [Simulation limits]).
#include <cstdint>

#include "core/scenario/scenario.h"

namespace fullshard::sim {

// World size: per-rank work outside the played programs (rank classes, the engine's group
// index, the report's per-rank entries) is linear in it.
constexpr int64_t kMaxSimulatedWorld = int64_t{1} << 17;  // 131,072 ranks
// Layers: the model's module tree is built once per recorded program.
constexpr int64_t kMaxSimulatedLayers = 4096;
// Host-program instructions: recorded (each allocation, access and timeline event kept) and
// played by the event engine (all programs, every played step).
constexpr uint64_t kMaxRecordedInstructions = 4'000'000;
constexpr uint64_t kMaxPlayedInstructions = 100'000'000;

// An upper bound on one rank's recorded host-program instructions for `played_steps` steps
// (initialisation included), from the model's layers and the micro-batches per step.
uint64_t estimate_program_instructions(const Scenario& s, int played_steps);

struct SimulationSize {
  uint64_t recorded_programs = 0;  // rank classes (one recording each)
  uint64_t played_programs =
      0;  // rank classes, or every rank (--ranks all, stragglers, uneven batch)
  uint64_t recorded_instructions = 0;
  uint64_t played_instructions = 0;
};

// Checks the world size and the layers first (computing the rank classes needs both bounded).
SimulationSize estimate_simulation_size(const Scenario& s, int played_steps, bool all_ranks);

// Throws InputError when `s` played for `played_steps` steps exceeds a limit.
void check_simulation_limits(const Scenario& s, int played_steps, bool all_ranks);
bool within_simulation_limits(const Scenario& s, int played_steps, bool all_ranks);

}  // namespace fullshard::sim
