#pragma once
// The launcher's view of a step: every rank's StepMetrics combined into one StepSummary (loss
// mean over ranks, times of the slowest rank, peaks the largest), and its --metrics line.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/key_averages.h"
#include "runner/step_metrics.h"

namespace fullshard::runner {

struct StepSummary {
  int step = 0;
  double loss = 0;                    // mean over ranks (those with a loss: NOTE [Pipeline losses])
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

// A step every rank has reported.
struct CompletedStep {
  StepSummary summary;
  std::vector<std::pair<int, double>> rank_losses;  // (rank, loss), in the order ranks reported
  // Each rank's router histograms of the step (StepMetrics::tokens_per_expert), MoE models only.
  std::map<int, std::vector<std::vector<int64_t>>> rank_routing;
  int nonfinite_rank = -1;  // the first rank reporting a non-finite loss (-1: none)
  double nonfinite_loss = 0;
};

class StepAggregator {
 public:
  // `world` ranks report each step; `predicted_ops` (not owned; may be null or empty): the
  // simulator's seconds per op key for each step, the last one for later steps.
  // `loss_ranks`: the ranks whose loss counts (empty: all); with pipeline parallelism the
  // ranks of the last stage, the others report NaN (NOTE [Pipeline losses]). `routing`: a
  // mixture-of-experts model, whose every rank's routing is kept, even a step without MoE calls
  // (a pipeline rank whose stages hold no MoE layer).
  StepAggregator(int world, const std::vector<PredictedKeyTimes>* predicted_ops,
                 std::vector<bool> loss_ranks = {}, bool routing = false)
      : world_(world),
        predicted_ops_(predicted_ops),
        loss_ranks_(std::move(loss_ranks)),
        routing_(routing) {}
  // Takes `rank`'s metrics of a step; returns the step once its last rank has reported.
  std::optional<CompletedStep> add(int rank, StepMetrics m);

 private:
  int world_;
  const std::vector<PredictedKeyTimes>* predicted_ops_;
  std::vector<bool> loss_ranks_;
  bool routing_;
  std::map<int, std::vector<std::pair<int, StepMetrics>>> pending_;  // step -> reports so far
};

// One line of the --metrics file (docs/cpu-backend.md): step, loss (null when not finite, with
// "nonfinite": true; NOTE [Non-finite loss]), tokens_per_s, step_time_s, compute_s, comm_s,
// exposed_comm_s, flops_per_s, the peaks, ranks [{rank, loss}] (those with a loss; with a MoE
// model each with its tokens_per_expert, and the ranks without a loss as {rank,
// tokens_per_expert}: NOTE [Recorded routing]), ops, and eval_loss when the step had a
// validation pass.
nlohmann::json metrics_line_json(const CompletedStep& s);

}  // namespace fullshard::runner
