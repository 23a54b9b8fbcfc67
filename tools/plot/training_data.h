#pragma once
// Training curves (`fullshard plot METRICS.jsonl [...]`, docs/plots.md "Training curves"): loss,
// tokens/s and peak memory per step, from fullshard's --metrics JSONL, from a CSV another trainer
// wrote (a PyTorch run's `step,loss[,tokens_per_s][,peak_allocated_bytes]`), or from a measured
// report's loss_per_step. Several runs overlay.
#include <cmath>
#include <string>
#include <vector>

namespace fullshard::plot {

// One row of a step's per-op table (the metrics' "ops", NOTE [Per-op times] in
// core/report/key_averages.h): measured and predicted seconds of one op key.
struct OpTimes {
  std::string key, kind;
  double measured_s = 0;
  double predicted_s = NAN;  // NaN: no prediction
};

struct TrainingRun {
  std::string label;  // the file name without its folder and extension
  // One entry per step, in file order. NaN where a value is absent (an empty CSV cell, a
  // non-finite loss): the curve has a gap there.
  std::vector<double> step;  // 1-based, as the launcher prints steps
  std::vector<double> loss;
  std::vector<double>
      eval_loss;  // validation loss (--eval-every), NaN between evaluations; empty when none
  std::vector<double> tokens_per_s;    // empty when the input has none
  std::vector<double> peak_allocated;  // bytes; empty when the input has none
  // The per-op table of the last step that has one (--metrics "ops"), and that step (1-based).
  std::vector<OpTimes> last_ops;
  double last_ops_step = NAN;
};

// True for inputs read as training curves: .jsonl (also .jsonl.partial, a stopped run's
// metrics) and .csv.
bool is_training_input(const std::string& path);

// `where` names the input in errors, e.g. "m.jsonl:3: loss ...". Throws InputError.
TrainingRun parse_metrics_jsonl(const std::string& text, const std::string& where);
TrainingRun parse_training_csv(const std::string& text, const std::string& where);
// By extension; a .json is a measured report (its loss_per_step). Throws InputError naming
// the path for a file that cannot be read or parsed.
TrainingRun load_training_run(const std::string& path);

}  // namespace fullshard::plot
