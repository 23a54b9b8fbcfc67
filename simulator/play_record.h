#pragma once
// The first of simulate_scenario's three parts (record, play, assemble; simulate.cc): run the
// training program of each rank class (or, with every rank played, of each rank) against a
// SimBackend and keep what it recorded.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/report/rank_report.h"
#include "core/scenario/scenario.h"
#include "simulator/extrapolate.h"
#include "simulator/sim_backend.h"

namespace fullshard::sim {

// One rank's recording: its backend (the program and the memory tracker), per-step memory.
struct Recorded {
  std::unique_ptr<SimBackend> backend;
  std::vector<uint64_t> allocated_after_step;
  std::vector<StepEndState> step_ends;  // NOTE [Steady state] in extrapolate.cc
  std::optional<OutOfMemoryInfo> oom;
  uint64_t init_peak_allocated_bytes = 0;  // RankReport's
  uint64_t init_peak_reserved_bytes = 0;
};

struct RecordOptions {
  bool all_ranks = false;          // one program per rank (else one per rank class)
  bool record_every_rank = false;  // no copies (NOTE [Shared recording] in play_record.cc)
  bool play_checkpoint = true;     // NOTE [Playing a checkpoint save]
  bool memory_timeline = true;     // SimulateOptions::memory_timeline
  int run_steps = 0;               // steps of the whole run (the scenario's are those played)
  std::function<void(Program&)> mutate_program;  // SimulateOptions::mutate_program
  std::function<void(size_t, size_t)> progress;  // SimulateOptions::progress
};

// The programs to play, one per played rank (class), with the recordings they came from.
struct RecordedPrograms {
  std::vector<std::vector<int>> classes;  // per program: its ranks (the first represents them)
  std::vector<bool> timeline_rank;        // per rank: keeps a memory timeline (a class's first)
  std::vector<Recorded> recs;
  std::vector<size_t> rec_of;              // per program: its recording in recs
  std::vector<uint64_t> rec_instructions;  // per recording: its program's instruction count
  std::vector<Program> programs;
};

// Records the programs of `s` (training.steps are the steps played); groups are interned into
// `groups`, which the recorded backends refer to and must outlive them.
RecordedPrograms record_programs(const Scenario& s, const RecordOptions& opt,
                                 GroupRegistry& groups);

}  // namespace fullshard::sim
