#pragma once
// Runs one rank of a scenario for real on any real Backend (CPU over Gloo, CUDA + NCCL): the
// same TrainingProgram the simulator plays. Used by the worker processes of `fullshard train`
// and by tests that run ranks as threads over an in-process store.
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/data/text_corpus.h"
#include "core/report/key_averages.h"
#include "core/report/rank_report.h"
#include "core/report/step_breakdown.h"
#include "core/runtime/backend.h"
#include "core/scenario/scenario.h"
#include "runner/checkpoint_saver.h"
#include "runner/step_metrics.h"

namespace fullshard::runner {

struct RankOptions {
  int steps = -1;  // -1: the scenario's training.steps
  // Fault injection for tests of failure handling: at the start of step `fault_step` this
  // rank dies (kill: SIGKILL to itself) or stalls forever (stall).
  enum class Fault { kNone, kKill, kStall } fault = Fault::kNone;
  int fault_step = 0;
  // Keep the measured memory timeline (downsampled to at most this many points; 0: none).
  // The backend's MemoryTracker records it from the start of the run on (NOTE [Measured
  // timeline] in rank_runner.cc), whether or not the backend was created recording one.
  size_t timeline_points = 0;
  // Per-op table of every step (StepMetrics::ops; NOTE [Per-op times] in
  // core/report/key_averages.h).
  bool op_table = true;
  // Collect this rank's final parameter shards (RankResult::local_params).
  bool collect_params = false;
  // Collect this rank's gradient shards of the first step run, reduced over the mesh and
  // before clipping (RankResult::local_grads). The oracle test (tests/unit/cpu_oracle_test.cc).
  bool collect_grads = false;
  // Collect the logits of this rank's first micro-batch of the first step run, with the weights
  // training starts from (RankResult::logits): a forward without autograd before the first
  // step, as a validation pass runs one (NOTE [Validation pass]); nothing else changes. The
  // oracle test compares them with PyTorch's. Not with tensor parallelism (vocab-sharded logits).
  bool collect_logits = false;
  // Sharded checkpoints (runner/checkpoint.h, docs/checkpoints.md): save after every
  // `checkpoint_every` steps into `checkpoint_dir`; start from the committed checkpoint
  // folder `resume_from` (its next step) instead of step 0.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  int checkpoint_keep_last = 0;  // --keep-last (NOTE [Checkpoint retention]); 0: keep all
  CheckpointSaveMode checkpoint_mode = CheckpointSaveMode::kSync;  // NOTE [Asynchronous save]
  std::string resume_from;
  // Validation (NOTE [Validation pass]): after every `eval_every` steps and after the last,
  // the mean loss of `eval_batches` validation batches (0: never). Needs validation data.
  int eval_every = 0;
  int eval_batches = 1;
  // The backend's data source (not owned), whose position checkpoints save; null: none saved.
  const BatchSource* batches = nullptr;
  // Safetensors weights to start from instead of the random init (runner/init_weights.h).
  std::string init_from;
};

struct RankResult {
  int rank = 0;
  std::vector<StepMetrics> steps;
  // Peaks, breakdown at the peak, memory timeline (with RankOptions::timeline_points), in
  // the report model predicted runs use; times on the backend's clock.
  RankReport report;
  // The last step's window on the backend's clock, its streams' busy times and their split
  // (NOTE [Measured step breakdown]); zeros when the backend measures no busy intervals.
  StepBreakdown last_step;
  // The final parameters, unsharded view of this rank's shards: fqn -> fp32 values of the
  // rows this rank owns (with RankOptions::collect_params).
  std::vector<std::pair<std::string, std::vector<float>>> local_params;
  // The final persistent buffers, whole (every rank holds them: NOTE [Persistent buffers in
  // checkpoints] in core/checkpoint/checkpoint_metadata.h), fqn -> fp32 values, module order
  // (with RankOptions::collect_params).
  std::vector<std::pair<std::string, std::vector<float>>> buffers;
  // What this rank's checkpoint saves cost (runner/checkpoint_saver.h).
  CheckpointSaveStats checkpoint;
  // The first step's gradients, the same way (with RankOptions::collect_grads).
  std::vector<std::pair<std::string, std::vector<float>>> local_grads;
  // With RankOptions::collect_logits: fp32 values of the logits [batch, seq, vocab].
  std::vector<float> logits;
};

// Which ranks of `s` report a loss: every rank, or with pipeline parallelism the ranks of the
// last stage (NOTE [Pipeline losses] in runner/step_aggregation.cc; the others report NaN).
std::vector<bool> loss_ranks(const Scenario& s);

// Runs the steps of `s` on `backend` (created for this rank of `s`'s world). Throws
// InputError for a scenario the backend cannot run, the backend's collective error when a
// peer fails, OutOfMemoryError when the device runs out.
RankResult run_rank(Backend& backend, const Scenario& s, const RankOptions& o,
                    const std::function<void(const StepMetrics&)>& on_step = {});

}  // namespace fullshard::runner
