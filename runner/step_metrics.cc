#include "runner/step_metrics.h"

#include <cmath>
#include <string>

namespace fullshard::runner {

nlohmann::json loss_json(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

double loss_from_json(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0.0;
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {
    const std::string v = it->get<std::string>();
    if (v == "inf") return HUGE_VAL;
    if (v == "-inf") return -HUGE_VAL;
  }
  return std::nan("");
}

nlohmann::json step_metrics_json(const StepMetrics& m, bool with_ops) {
  nlohmann::json j{{"step", m.step},
          {"loss", loss_json(m.loss)},
          {"seconds", m.seconds},
          {"tokens", m.tokens},
          {"peak_allocated_bytes", m.peak_allocated_bytes},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"compute_s", m.compute_s},
          {"comm_s", m.comm_s},
          {"exposed_comm_s", m.exposed_comm_s},
          {"flops", m.flops},
          {"eval_loss", std::isnan(m.eval_loss) ? nlohmann::json(nullptr) : loss_json(m.eval_loss)},
          {"ops", with_ops ? key_averages_json(m.ops) : nlohmann::json(nullptr)}};
  if (!m.tokens_per_expert.empty()) j["tokens_per_expert"] = m.tokens_per_expert;
  return j;
}

StepMetrics step_metrics_from_json(const nlohmann::json& j) {
  StepMetrics m;
  m.step = j.value("step", 0);
  m.loss = loss_from_json(j, "loss");
  const auto eval = j.find("eval_loss");
  if (eval != j.end() && !eval->is_null()) m.eval_loss = loss_from_json(j, "eval_loss");
  m.seconds = j.value("seconds", 0.0);
  m.tokens = j.value("tokens", int64_t{0});
  m.peak_allocated_bytes = j.value("peak_allocated_bytes", uint64_t{0});
  m.peak_reserved_bytes = j.value("peak_reserved_bytes", uint64_t{0});
  m.compute_s = j.value("compute_s", 0.0);
  m.comm_s = j.value("comm_s", 0.0);
  m.exposed_comm_s = j.value("exposed_comm_s", 0.0);
  m.flops = j.value("flops", 0.0);
  const auto ops = j.find("ops");
  if (ops != j.end() && ops->is_array()) m.ops = key_averages_from_json(*ops);
  const auto routing = j.find("tokens_per_expert");
  if (routing != j.end() && routing->is_array())
    m.tokens_per_expert = routing->get<std::vector<std::vector<int64_t>>>();
  return m;
}

}  // namespace fullshard::runner
