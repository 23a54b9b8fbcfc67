#pragma once
// `fullshard simulate`: scenario -> per rank (or per class of identical ranks) host
// programs against the SimBackend -> event engine (timing + checks) -> report.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/memory/memory_tracker.h"
#include "core/scenario/scenario.h"
#include "simulator/engine/engine.h"

namespace fullshard::sim {

struct SimulateOptions {
  bool all_ranks = false;         // --ranks all: record every rank's program
  bool checks = true;             // protocol checks (mismatch, race, use after free)
  size_t max_timeline_points = 4000;  // per rank class, downsampled keeping the extremes
  // Test hook: edits a rank's recorded program before the engine plays it (inject bugs).
  std::function<void(Program&)> mutate_program;
  // Called after each rank program is recorded (done, total): progress for long runs.
  std::function<void(size_t, size_t)> progress;
};

struct TimelinePoint {
  double time_s = 0;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t host_bytes = 0;
  CategoryBytes by_category{};
};

struct OutOfMemoryInfo {
  uint64_t requested_bytes = 0;
  std::string what;        // what was being allocated
  std::string category;
  uint64_t capacity_bytes = 0;
  MemorySnapshot at_failure;
  int step = 0;
};

// One class of ranks whose programs are identical (one representative was simulated).
struct RankClassReport {
  std::vector<int> ranks;
  int representative = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_host_bytes = 0;
  CategoryBytes breakdown_at_peak{};   // device allocated bytes by category at the peak
  double peak_time_s = 0;
  uint64_t end_allocated_bytes = 0;    // after the last step
  std::vector<uint64_t> allocated_after_step;  // allocated bytes after each step's end
  AllocatorStats allocator;
  std::vector<TimelinePoint> timeline;
  std::optional<OutOfMemoryInfo> oom;
  double busy_s[kNumStreams] = {};
  double compute_s = 0, exposed_comm_s = 0;
  double end_time_s = 0;               // when the rank's last work finished
  uint64_t instructions = 0;           // recorded host-program instructions
  int collectives_per_step[5] = {};    // by CollectiveKind, in the last step
};

struct SimulationReport {
  std::string scenario;
  int world_size = 0;
  std::vector<RankClassReport> classes;
  bool simulated_all_ranks = false;
  double step_time_s = 0;      // the last step, slowest rank
  double exposed_comm_s = 0;   // in the last step, worst rank class
  double compute_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double model_flops_per_token = 0;
  int64_t parameters = 0;
  uint64_t capacity_bytes = 0;
  std::vector<Problem> problems;
  bool out_of_memory = false;
  uint64_t events_processed = 0;
  bool ok() const { return problems.empty() && !out_of_memory; }
};

SimulationReport simulate_scenario(const Scenario& s, const SimulateOptions& options = {});

// Which ranks have identical host programs: ranks whose every parameter has the same local
// (unpadded) shard rows run the same program. Returns the classes, each sorted.
std::vector<std::vector<int>> rank_classes(const Scenario& s);

}  // namespace fullshard::sim
