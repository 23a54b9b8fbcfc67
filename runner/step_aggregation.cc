#include "runner/step_aggregation.h"

#include <algorithm>
#include <cmath>

namespace fullshard::runner {

std::optional<CompletedStep> StepAggregator::add(int rank, StepMetrics m) {
  const int step = m.step;
  auto& v = pending_[step];
  v.emplace_back(rank, std::move(m));
  if (static_cast<int>(v.size()) != world_) return std::nullopt;
  CompletedStep out;
  StepSummary& st = out.summary;
  st.step = step;
  double loss = 0, tokens = 0, flops = 0;
  int with_loss = 0;
  for (const auto& [r, x] : v) {
    // NOTE [Pipeline losses]: with pipeline parallelism only the last stage computes a loss
    // (torchtitan logs the last stage's); the other ranks' NaN is no divergence.
    const bool has_loss = loss_ranks_.empty() || loss_ranks_[static_cast<size_t>(r)];
    flops += x.flops;
    tokens += static_cast<double>(x.tokens);
    if (routing_ || !x.tokens_per_expert.empty())
      out.rank_routing[r] = std::move(x.tokens_per_expert);
    if (has_loss) {
      if (!std::isfinite(x.loss) && out.nonfinite_rank < 0) {
        out.nonfinite_rank = r;
        out.nonfinite_loss = x.loss;
      }
      out.rank_losses.emplace_back(r, x.loss);
      loss += x.loss;
      ++with_loss;
    }
    st.compute_s = std::max(st.compute_s, x.compute_s);
    st.exposed_comm_s = std::max(st.exposed_comm_s, x.exposed_comm_s);
    st.comm_s = std::max(st.comm_s, x.comm_s);
    st.step_time_s = std::max(st.step_time_s, x.seconds);
    st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, x.peak_allocated_bytes);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, x.peak_reserved_bytes);
  }
  st.loss = loss / std::max(with_loss, 1);
  // A validation pass ran after the step when the first rank to report says so.
  if (!std::isnan(v.front().second.eval_loss)) {
    double ev = 0;
    for (const auto& [r, x] : v) ev += x.eval_loss;
    st.eval_loss = ev / world_;
  }
  st.tokens_per_s = st.step_time_s > 0 ? tokens / st.step_time_s : 0;
  st.flops_per_s = st.step_time_s > 0 ? flops / st.step_time_s : 0;
  for (auto& [r, x] : v)
    if (r == 0) {
      st.ops = std::move(x.ops);
      if (predicted_ops_ && !predicted_ops_->empty()) {
        const size_t k =
            std::min(static_cast<size_t>(std::max(st.step, 0)), predicted_ops_->size() - 1);
        attach_predictions(st.ops, (*predicted_ops_)[k]);
      }
      break;
    }
  pending_.erase(step);
  return out;
}

nlohmann::json metrics_line_json(const CompletedStep& s) {
  const StepSummary& st = s.summary;
  auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; };
  nlohmann::json per_rank = nlohmann::json::array();
  for (const auto& [rank, loss] : s.rank_losses) {
    per_rank.push_back({{"rank", rank}, {"loss", finite_or_null(loss)}});
    const auto routing = s.rank_routing.find(rank);  // NOTE [Recorded routing]
    if (routing != s.rank_routing.end()) per_rank.back()["tokens_per_expert"] = routing->second;
  }
  // Pipeline ranks without a loss still route their stages' tokens (NOTE [MoE in pipeline
  // stages] in core/train/pipeline_program.cc).
  for (const auto& [rank, calls] : s.rank_routing) {
    bool listed = false;
    for (const auto& [r, loss] : s.rank_losses) listed = listed || r == rank;
    if (!listed) per_rank.push_back({{"rank", rank}, {"tokens_per_expert", calls}});
  }
  nlohmann::json line{{"step", st.step},
                      {"loss", finite_or_null(st.loss)},
                      {"nonfinite", !std::isfinite(st.loss)},
                      {"tokens_per_s", st.tokens_per_s},
                      {"step_time_s", st.step_time_s},
                      {"compute_s", st.compute_s},
                      {"comm_s", st.comm_s},
                      {"exposed_comm_s", st.exposed_comm_s},
                      {"flops_per_s", st.flops_per_s},
                      {"peak_allocated_bytes", st.peak_allocated_bytes},
                      {"peak_reserved_bytes", st.peak_reserved_bytes},
                      {"ranks", per_rank},
                      {"ops", key_averages_json(st.ops)}};
  if (!std::isnan(st.eval_loss)) line["eval_loss"] = finite_or_null(st.eval_loss);
  return line;
}

}  // namespace fullshard::runner
