#pragma once
// `fullshard train`: the local launcher (N worker processes, rendezvous through a FileStore in
// a temporary directory, progress and metrics) and the worker entry point, which also runs
// under torchrun-style environment variables so that other launchers (torchrun-like scripts,
// Slurm, mpirun) can start ranks on several machines. Backend-neutral: the worker builds its
// Backend from the registry (runner/backend_factory.h).
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/key_averages.h"
#include "runner/backend_factory.h"
#include "runner/checkpoint_saver.h"

namespace fullshard::runner {

struct LaunchOptions {
  std::string scenario_path;
  std::string backend;  // --backend: a name in the registry, "" for the scenario's default
  std::string
      collectives;  // --collectives (CUDA): "" auto, "nccl", or "gloo" (staged through host memory)
  int nproc = 0;    // 0: the scenario's world size
  std::string metrics_path;  // one JSON object per step (empty: none)
  int timeout_s = 60;        // per collective
  bool check_fingerprints = false;
  int steps = -1;        // -1: the scenario's training.steps
  bool progress = true;  // progress bar / lines on stderr
  std::string self_exe;  // the fullshard binary (default /proc/self/exe)
  bool collect_reports =
      false;  // workers write their measured timelines (LaunchResult::rank_reports)
  // A non-finite loss (NOTE [Non-finite loss]): stop the run (kill the workers, exit 1) or go on.
  enum class OnNonFinite { kStop, kContinue } on_nonfinite = OnNonFinite::kStop;
  // Sharded checkpoints (docs/checkpoints.md): save every N steps into checkpoint_dir; resume
  // from "latest" (under checkpoint_dir) or a checkpoint folder ("": start at step 0).
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  int keep_last = 0;  // --keep-last: committed checkpoints kept (0: all)
  std::string checkpoint_mode =
      "sync";  // --checkpoint-mode: sync or async (NOTE [Asynchronous save])
  std::string resume;
  std::string init_from;    // safetensors weights to start from (runner/init_weights.h)
  std::string data;         // --data: training tokens instead of training.data.path (docs/data.md)
  std::string data_format;  // --data-format: instead of training.data.format
  int eval_every = 0;  // --eval-every: validation loss after every N steps (NOTE [Validation pass])
  int eval_batches = 4;  // --eval-batches: validation batches per evaluation
  // The simulator's seconds per op key for each played step (simulator/op_prediction.h), set
  // beside rank 0's measured per-op table of each step (StepSummary::ops, the metrics' "ops");
  // empty: measured only.
  std::vector<PredictedKeyTimes> predicted_ops;
};

// The scenario of a run: o.scenario_path with --data applied (a path relative to the working
// directory). Throws InputError as load_scenario_file does.
Scenario load_run_scenario(const LaunchOptions& o);

// Checks the options a user typed (steps, nproc, timeout) and, for `kind`, that this machine
// can run `s` (GPUs present for a device backend; host memory for CPU workers of a GPU
// scenario). Throws InputError naming the flag or field with the fix.
void validate_launch(const LaunchOptions& o, const Scenario& s, const BackendKind& kind);
// Host memory the kernel says is available (/proc/meminfo MemAvailable), 0 when unknown.
uint64_t host_memory_available_bytes();

struct MeasuredRank {
  int rank = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  CheckpointSaveStats checkpoint;                            // what its checkpoint saves cost
  std::vector<std::pair<std::string, int64_t>> path_counts;  // Backend::path_counts at its end
};

struct StepSummary {
  int step = 0;
  double loss = 0;                    // mean over ranks
  double step_time_s = 0;             // slowest rank
  double tokens_per_s = 0;            // all ranks' tokens / slowest rank's step time
  uint64_t peak_allocated_bytes = 0;  // max over ranks
  uint64_t peak_reserved_bytes = 0;
  double compute_s = 0;       // slowest rank's compute-stream busy time
  double exposed_comm_s = 0;  // worst rank's communication not overlapped by compute
  double comm_s = 0;          // busiest rank's communication (union of its collective streams)
  double flops_per_s = 0;     // all ranks' kernel FLOPs / step_time_s
  double eval_loss =
      std::numeric_limits<double>::quiet_NaN();  // validation loss after the step, mean over ranks
  // Rank 0's per-op table of the step (NOTE [Per-op times]), with LaunchOptions::predicted_ops.
  std::vector<KeyAverage> ops;
};

struct LaunchResult {
  int exit_code = 0;  // 0 ok; 1 a rank failed or the loss became non-finite; 2 bad input
  std::vector<std::string> errors;  // one line per failed rank
  std::vector<MeasuredRank> ranks;  // by rank (complete only when exit_code == 0)
  std::vector<StepSummary> steps;
  double wall_s = 0;
  // With collect_reports: per rank, its report as the worker measured it, in the report
  // format's objects: {"class": rank_class_json, "timeline": rank_timeline_json}.
  std::vector<nlohmann::json> rank_reports;
  std::string backend;      // the backend the workers ran
  int nonfinite_step = -1;  // the first step whose loss was non-finite on some rank (-1: none)
};

// Validates the scenario, starts the workers, waits for them, kills the rest when one fails
// (after the collective timeout), and removes the rendezvous directory.
LaunchResult launch_local(const LaunchOptions& o, const BackendRegistry& backends);

// True when the environment says this process is a worker (RANK and WORLD_SIZE set).
bool is_worker_environment();
// Worker entry: RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (default RANK and
// WORLD_SIZE: one machine), FULLSHARD_STORE_DIR (a directory all ranks share), optional
// FULLSHARD_HOSTNAME (this rank's address, default 127.0.0.1) and FULLSHARD_REPORT_FD (the
// launcher's pipe). Returns the exit code.
int worker_main(const LaunchOptions& o, const BackendRegistry& backends);

}  // namespace fullshard::runner
