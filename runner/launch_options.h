#pragma once
// The options of a `fullshard train` / `fullshard compare` run, and their JSON: the one message
// the local launcher hands each worker (NOTE [Worker options]). A new option is a field here and
// a line in for_each_option (launch_options.cc); its flag is the CLI's (tools/fullshard).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/key_averages.h"
#include "core/scenario/checkpoint_save_mode.h"
#include "core/scenario/scenario.h"

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
  CheckpointSaveMode checkpoint_mode = CheckpointSaveMode::kSync;  // --checkpoint-mode
  std::string resume;
  std::string init_from;    // safetensors weights to start from (runner/init_weights.h)
  std::string data;         // --data: training tokens instead of training.data.path (docs/data.md)
  std::string data_format;  // --data-format: instead of training.data.format
  int eval_every = 0;  // --eval-every: validation loss after every N steps (NOTE [Validation pass])
  int eval_batches = 4;  // --eval-batches: validation batches per evaluation
  // The simulator's seconds per op key for each played step (simulator/op_prediction.h), set
  // beside rank 0's measured per-op table of each step (StepSummary::ops, the metrics' "ops");
  // empty: measured only. The launcher's alone: not in the JSON.
  std::vector<PredictedKeyTimes> predicted_ops;
};

// Every option but predicted_ops, one key per field named as the field, on_nonfinite as
// "stop" or "continue", checkpoint_mode as "sync" or "async".
nlohmann::json launch_options_json(const LaunchOptions& o);
// Its inverse: a missing key keeps the default. Throws InputError naming `where` (with the
// key) for a value of the wrong type or an unknown key.
LaunchOptions launch_options_from_json(const nlohmann::json& j, const std::string& where);

// The scenario of a run: o.scenario_path with --data applied (a path relative to the working
// directory). Throws InputError as load_scenario_file does.
Scenario load_run_scenario(const LaunchOptions& o);

}  // namespace fullshard::runner
