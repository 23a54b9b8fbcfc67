#include "core/pipeline/pipeline_timeline.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

bool is_backward(PipelineOp op) {
  return op == PipelineOp::kFullBackward || op == PipelineOp::kBackwardInput;
}

}  // namespace

double PipelineTimeline::bubble_fraction() const {
  if (makespan <= 0 || busy.empty()) return 0.0;
  const double total = std::accumulate(busy.begin(), busy.end(), 0.0);
  return 1.0 - total / (static_cast<double>(busy.size()) * makespan);
}

std::string check_pipeline_order(const PipelineScheduleOptions& o, const PipelineOrder& order) {
  if (static_cast<int>(order.size()) != o.pp_size)
    return fmt::format("{} ranks in the order for pp {}", order.size(), o.pp_size);
  const int stages = o.num_stages(), m = o.microbatches;
  // Per (stage, microbatch): how many F, B, I, W ran so far.
  std::vector<std::array<int, 4>> seen(static_cast<size_t>(stages) * m, {0, 0, 0, 0});
  for (int r = 0; r < o.pp_size; ++r) {
    for (const PipelineAction& a : order[r]) {
      const std::string what =
          fmt::format("rank {} action {}{}{}", r, a.stage, pipeline_op_letter(a.op), a.microbatch);
      if (a.stage < 0 || a.stage >= stages || a.microbatch < 0 || a.microbatch >= m)
        return what + ": stage or microbatch out of range";
      if (pipeline_stage_rank(o, a.stage) != r)
        return fmt::format("{}: stage {} is on rank {}", what, a.stage,
                           pipeline_stage_rank(o, a.stage));
      auto& c = seen[static_cast<size_t>(a.stage) * m + a.microbatch];
      const int f = c[0], b = c[1], i = c[2], w = c[3];
      switch (a.op) {
        case PipelineOp::kForward:
          if (f) return what + ": a second forward";
          break;
        case PipelineOp::kFullBackward:
        case PipelineOp::kBackwardInput:
          if (!f) return what + ": backward before its forward";
          if (b || i) return what + ": a second backward";
          break;
        case PipelineOp::kBackwardWeight:
          if (!i) return what + ": W before its I";
          if (w) return what + ": a second W";
          break;
      }
      ++c[static_cast<int>(a.op == PipelineOp::kForward         ? 0
                           : a.op == PipelineOp::kFullBackward  ? 1
                           : a.op == PipelineOp::kBackwardInput ? 2
                                                                : 3)];
    }
  }
  for (int s = 0; s < stages; ++s)
    for (int mb = 0; mb < m; ++mb) {
      const auto& c = seen[static_cast<size_t>(s) * m + mb];
      if (c[0] != 1) return fmt::format("stage {} microbatch {}: no forward", s, mb);
      if (c[1] + c[2] != 1) return fmt::format("stage {} microbatch {}: no backward", s, mb);
      if (c[2] != c[3]) return fmt::format("stage {} microbatch {}: I without its W", s, mb);
    }
  return "";
}

PipelineTimeline play_pipeline_order(const PipelineScheduleOptions& o, const PipelineOrder& order,
                                     const PipelineDurations& d) {
  const std::string problem = check_pipeline_order(o, order);
  if (!problem.empty())
    throw InputError("pipeline order", problem, "give every stage's F and B (or I and W) once");
  const int stages = o.num_stages(), m = o.microbatches;
  auto at = [m](int stage, int mb) { return static_cast<size_t>(stage) * m + mb; };
  // End time of each stage's forward, and of its input gradient (B or I), per microbatch.
  std::vector<double> forward_end(static_cast<size_t>(stages) * m, kNotYet);
  std::vector<double> grad_end(forward_end);
  PipelineTimeline t;
  t.start.resize(o.pp_size);
  t.end.resize(o.pp_size);
  t.busy.assign(o.pp_size, 0.0);
  std::vector<size_t> next(o.pp_size, 0);
  std::vector<double> free_at(o.pp_size, 0.0);
  size_t left = 0;
  for (const auto& r : order) left += r.size();
  auto arrival = [&](double end, int from_stage, int rank) {
    return end + (pipeline_stage_rank(o, from_stage) == rank ? 0.0 : d.p2p);
  };
  while (left > 0) {
    bool moved = false;
    for (int r = 0; r < o.pp_size; ++r) {
      while (next[r] < order[r].size()) {
        const PipelineAction& a = order[r][next[r]];
        double ready = 0.0, cost = 0.0;
        if (a.op == PipelineOp::kForward) {
          if (a.stage > 0)
            ready = arrival(forward_end[at(a.stage - 1, a.microbatch)], a.stage - 1, r);
          cost = d.forward;
        } else if (is_backward(a.op)) {
          ready = forward_end[at(a.stage, a.microbatch)];
          if (a.stage + 1 < stages)
            ready =
                std::max(ready, arrival(grad_end[at(a.stage + 1, a.microbatch)], a.stage + 1, r));
          cost = a.op == PipelineOp::kFullBackward ? d.backward_input + d.backward_weight
                                                   : d.backward_input;
        } else {
          ready = grad_end[at(a.stage, a.microbatch)];
          cost = d.backward_weight;
        }
        if (ready == kNotYet) break;
        const double start = std::max(free_at[r], ready);
        t.start[r].push_back(start);
        t.end[r].push_back(start + cost);
        free_at[r] = start + cost;
        t.busy[r] += cost;
        t.makespan = std::max(t.makespan, start + cost);
        if (a.op == PipelineOp::kForward) forward_end[at(a.stage, a.microbatch)] = start + cost;
        if (is_backward(a.op)) grad_end[at(a.stage, a.microbatch)] = start + cost;
        ++next[r];
        --left;
        moved = true;
      }
    }
    if (!moved) {
      std::string blocked;
      for (int r = 0; r < o.pp_size; ++r)
        if (next[r] < order[r].size())
          blocked += fmt::format("{}rank {} at {}{}{}", blocked.empty() ? "" : ", ", r,
                                 order[r][next[r]].stage, pipeline_op_letter(order[r][next[r]].op),
                                 order[r][next[r]].microbatch);
      throw InputError("pipeline order", "deadlocks: " + blocked,
                       "order each rank's actions so that every input exists before its use");
    }
  }
  return t;
}

std::vector<int> peak_in_flight_microbatches(const PipelineOrder& order) {
  std::vector<int> peak;
  for (const auto& rank : order) {
    int live = 0, most = 0;
    for (const PipelineAction& a : rank) {
      if (a.op == PipelineOp::kForward) most = std::max(most, ++live);
      if (a.op == PipelineOp::kFullBackward || a.op == PipelineOp::kBackwardWeight) --live;
    }
    peak.push_back(most);
  }
  return peak;
}

}  // namespace fullshard
