#pragma once
// `fullshard simulate`: scenario -> per rank (or per class of identical ranks) host
// programs against the SimBackend -> event engine (timing + checks) -> report.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/memory/memory_tracker.h"
#include "core/report/rank_report.h"
#include "core/scenario/scenario.h"
#include "simulator/checkpoint_cost.h"
#include "simulator/engine/engine.h"
#include "simulator/extrapolate.h"
#include "simulator/pipeline_report.h"
#include "simulator/step_breakdown.h"

namespace fullshard::sim {

struct PlayedRun;

// Which time model plays the programs (docs/cost-model.md).
enum class TimeModel : uint8_t {
  kHardware,     // NCCL's cost model over the topology + roofline compute, from the profile
  kPlaceholder,  // PlaceholderCostModel: a fixed roofline and ring (tests of the engine)
};

struct SimulateOptions {
  bool all_ranks = false;  // --ranks all: record every rank's program (forced when
                           // hardware.rank_speed makes ranks differ)
  TimeModel time_model = TimeModel::kHardware;
  // With every rank played: record each rank's host program instead of copying its class's
  // (NOTE [Shared recording] in play_record.cc); tests check the copies against recordings.
  bool record_every_rank = false;
  bool checks = true;  // protocol checks (mismatch, race, use after free)
  // training.checkpoint: play the saves (NOTE [Playing a checkpoint save] in
  // simulator/checkpoint_play.h). The planner prices them by the closed form instead.
  bool play_checkpoint = true;
  size_t max_timeline_points = 4000;  // per rank class, downsampled keeping the extremes
  // Record and report each class's memory timeline (its peak time and the ops in flight at
  // the peak come from it). Off for callers that read none of it (the planner).
  bool memory_timeline = true;
  // Steps played before checking for a steady state (NOTE [Steady state] in extrapolate.cc);
  // more are played (up to kMaxSimulatedSteps) until the last two agree, and the rest of
  // training.steps are extrapolated. 0 (or >= training.steps): play every step.
  int simulated_steps = kFirstSimulatedSteps;
  // Test hook: edits a rank's recorded program before the engine plays it (inject bugs).
  std::function<void(Program&)> mutate_program;
  // Called after each rank program is recorded (done, total): progress for long runs.
  std::function<void(size_t, size_t)> progress;
  // Called once at the end with what the engine played (exporters: simulator/trace.h).
  std::function<void(const PlayedRun&)> on_played;
};

// The per-rank part of the report is shared with measured runs (core/report/rank_report.h).
using fullshard::InFlightOp;
using fullshard::OutOfMemoryInfo;
using fullshard::TimelinePoint;
using RankClassReport = fullshard::RankReport;

struct SimulationReport {
  std::string scenario;
  int world_size = 0;
  std::vector<RankClassReport> classes;
  bool simulated_all_ranks = false;
  double step_time_s = 0;  // the last step, slowest rank
  // NOTE [Steady state] (extrapolate.cc): training.steps, of which the first simulated_steps
  // were played and the other extrapolated_steps repeat the last played one.
  int steps = 0;
  int simulated_steps = 0;
  int extrapolated_steps = 0;
  bool steady_state = true;    // the last two played steps agree (false: extrapolated anyway)
  double total_time_s = 0;     // the whole run (all steps), slowest rank
  double tokens_per_step = 0;  // all ranks
  double total_tokens = 0;     // all ranks, all steps
  double exposed_comm_s = 0;   // per step (whole run / steps), worst rank class
  double compute_s = 0;        // per step, busiest compute stream
  double comm_s = 0;           // per step, busiest communication (union of comm streams)
  std::string time_model;      // "nccl+roofline" or "placeholder"
  // The slowest rank's last step: busy times and the critical path (step_breakdown.h).
  StepBreakdown last_step;
  int last_step_rank = -1;  // whose last step that is (a class representative)
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double model_flops_per_token = 0;
  int64_t parameters = 0;
  // With training.frozen or model.lora (else 0): the parameters left trainable and the LoRA
  // adapters among them (count_parameters in core/train/training_program.h); `parameters` is
  // the base model's.
  int64_t trainable_parameters = 0;
  int64_t lora_parameters = 0;
  uint64_t capacity_bytes = 0;
  // Async TP's symmetric-memory workspace (core/model/async_tp.h): device memory outside the
  // caching allocator, taken from its capacity (capacity_bytes is what is left).
  uint64_t symmetric_memory_bytes = 0;
  std::vector<Problem> problems;
  bool out_of_memory = false;
  // NOTE [Host memory per node] (host_memory.h): the node's host DRAM (the profile's
  // host_memory_bytes; 0: not checked), the fullest node's pinned host bytes, and whether they
  // exceed it.
  uint64_t host_memory_bytes = 0;
  uint64_t peak_host_bytes_per_node = 0;
  int peak_host_node = 0;
  bool host_out_of_memory = false;
  // training.checkpoint: its cost at this step time (NOTE [Checkpoint cost]) and, when played
  // (NOTE [Playing a checkpoint save]), the saves as played. step_time_s does not include it
  // (the saves fall between steps); total_time_s does (the played saves, plus the closed form's
  // exposed time for each save of the run that was not played); step_time_with_checkpoint_s()
  // adds the closed form's amortised cost.
  std::optional<CheckpointCost> checkpoint;
  double step_time_with_checkpoint_s() const {
    return step_time_s + (checkpoint ? checkpoint->amortised_s_per_step : 0);
  }
  // With a pp dim: the schedule, its bubble and microbatches in flight (pipeline_report.h).
  std::optional<PipelineReport> pipeline;
  uint64_t events_processed = 0;
  // training.init when not "meta" (whose start-up holds only the shards): the summary then
  // prints each class's start-up peaks (NOTE [Initialisation modes]).
  std::string init;
  bool ok() const { return problems.empty() && !out_of_memory && !host_out_of_memory; }
};

// What the engine played, handed to SimulateOptions::on_played at the end of
// simulate_scenario (the Chrome trace export reads it).
struct PlayedRun {
  const std::vector<Program>& programs;  // one per rank class (or rank), as played
  const std::vector<GroupInfo>& groups;
  const EngineResult& result;
  const CostModel& cost;
  const SimulationReport& report;  // classes parallel to programs
};

SimulationReport simulate_scenario(const Scenario& s, const SimulateOptions& options = {});

// Which ranks have identical host programs: ranks whose every parameter has the same local
// (unpadded) shard rows and whose micro-batch is the same run the same program. Returns the
// classes, each sorted.
std::vector<std::vector<int>> rank_classes(const Scenario& s);

}  // namespace fullshard::sim
