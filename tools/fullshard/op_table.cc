#include "tools/fullshard/op_table.h"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "simulator/op_prediction.h"

namespace fullshard::cli {

std::function<void(const sim::PlayedRun&)> keep_predicted_ops(std::vector<PredictedKeyTimes>* out) {
  return [out](const sim::PlayedRun& run) { *out = sim::predicted_key_times(run, 0); };
}

std::vector<PredictedKeyTimes> predict_ops(Scenario s, int steps) {
  std::vector<PredictedKeyTimes> out;
  if (steps >= 0) s.training.steps = steps;
  if (s.training.steps <= 0) return out;
  sim::SimulateOptions so;
  so.max_timeline_points = 2;
  so.play_checkpoint = false;
  so.on_played = keep_predicted_ops(&out);
  try {
    const sim::SimulationReport r = sim::simulate_scenario(s, so);
    if (!r.ok()) {
      std::fprintf(
          stderr,
          "fullshard: the simulation of this run does not complete (fullshard simulate says why); "
          "the per-op table has no predicted times\n");
      out.clear();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fullshard: no per-op prediction (%s)\n", e.what());
    out.clear();
  }
  return out;
}

std::string differ_most_text(const std::vector<KeyAverage>& ops, size_t n) {
  if (ops.empty()) return "";
  double measured = 0, predicted = 0;
  bool any_predicted = false;
  for (const KeyAverage& r : ops) {
    measured += r.measured_s;
    if (r.predicted_s >= 0) {
      predicted += r.predicted_s;
      any_predicted = true;
    }
  }
  std::string out;
  if (!any_predicted) {
    out += fmt::format(
        "  per-op table (rank 0, last step): {} keys, {:.6f} s measured, no prediction\n",
        ops.size(), measured);
    return out;
  }
  out += fmt::format(
      "  per-op table (rank 0, last step): {} keys, {:.6f} s measured, {:.6f} s predicted "
      "({:+.1f}%)\n",
      ops.size(), measured, predicted,
      predicted > 0 ? 100.0 * (measured - predicted) / predicted : 0.0);
  const auto rows = differ_most(ops, n);
  if (rows.empty()) return out;
  out += fmt::format("  ops where measured and predicted differ most:\n");
  out += fmt::format("    {:<48} {:>6} {:>12} {:>12} {:>8} {:>12} {:>12}\n", "key (kind)", "calls",
                     "measured s", "predicted s", "ratio", "GFLOP/s", "GB/s");
  for (const KeyAverage& r : rows) {
    std::string label = r.key + " (" + r.kind + ")";
    if (label.size() > 48) label = label.substr(0, 45) + "...";
    const std::string ratio =
        r.predicted_s > 0 ? fmt::format("{:.2f}x", r.measured_s / r.predicted_s) : "-";
    out += fmt::format("    {:<48} {:>6} {:>12.6f} {:>12.6f} {:>8} {:>12.2f} {:>12.2f}\n", label,
                       r.calls, r.measured_s, r.predicted_s, ratio, r.flops_per_s() * 1e-9,
                       r.bytes_per_s() * 1e-9);
  }
  return out;
}

nlohmann::json ops_per_step_json(const std::vector<runner::StepSummary>& steps) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& st : steps)
    if (!st.ops.empty())
      a.push_back({{"step", st.step}, {"rank", 0}, {"ops", key_averages_json(st.ops)}});
  return a;
}

}  // namespace fullshard::cli
