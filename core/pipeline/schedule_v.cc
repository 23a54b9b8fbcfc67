// The V-shaped schedules (rank r holds stages r and 2 pp - 1 - r): ZBVZeroBubble (ZB-V of
// arXiv 2401.10241, section 6) and DualPipeV (DeepSeek's DualPipe folded into a V), as
// torch/distributed/pipelining/schedules.py builds their `pipeline_order`.
#include <algorithm>
#include <deque>
#include <utility>

#include "core/pipeline/schedule_generators.h"

namespace fullshard::pipeline_detail {

// Warm-up: forwards of the first chunk, then both chunks in turn, then the second chunk's
// forward + I + W; a steady phase of F I W on each chunk; a cool-down of I's, then W's. The
// counts assume at least 2 pp - 1 microbatches; with fewer, the actions of the microbatches
// that do not exist are dropped afterwards (as PyTorch does).
std::vector<PipelineAction> zbv_actions(const PipelineScheduleOptions& o, int rank) {
  const int pp = o.pp_size;
  const int n = std::max(2 * pp - 1, o.microbatches);
  const int c0 = rank, c1 = o.num_stages() - 1 - rank;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<PipelineAction> out;
  auto add = [&](int stage, PipelineOp op, int mb) { out.push_back({stage, op, mb}); };
  for (int i = 0; i < 2 * (pp - rank) - 1; ++i) add(c0, PipelineOp::kForward, f0++);
  for (int i = 0; i < rank; ++i) {
    add(c1, PipelineOp::kForward, f1++);
    add(c0, PipelineOp::kForward, f0++);
  }
  for (int i = 0; i < pp - rank; ++i) {
    add(c1, PipelineOp::kForward, f1++);
    add(c1, PipelineOp::kBackwardInput, b1);
    add(c1, PipelineOp::kBackwardWeight, b1++);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(c0, PipelineOp::kForward, f0++);
    add(c0, PipelineOp::kBackwardInput, b0);
    add(c0, PipelineOp::kBackwardWeight, b0++);
    add(c1, PipelineOp::kForward, f1++);
    add(c1, PipelineOp::kBackwardInput, b1);
    add(c1, PipelineOp::kBackwardWeight, b1++);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    add(c0, PipelineOp::kBackwardInput, b0++);
    add(c1, PipelineOp::kBackwardInput, b1++);
  }
  for (int i = 0; i < pp - rank; ++i) {
    add(c0, PipelineOp::kBackwardInput, b0++);
    add(c0, PipelineOp::kBackwardWeight, w0++);
  }
  while (w1 < b1) add(c1, PipelineOp::kBackwardWeight, w1++);
  while (w0 < b0) add(c0, PipelineOp::kBackwardWeight, w0++);
  std::erase_if(out, [&](const PipelineAction& a) { return a.microbatch >= o.microbatches; });
  return out;
}

// Eight phases per rank (DualPipeV in schedules.py): forwards of the first chunk, forwards of
// both, I W F of the second, the main phase of overlapped F+B pairs across the two chunks,
// B then an overlapped pair, full backwards turning into zero-bubble I's half way (which half
// depends on the rank's parity), then the deferred W's. A W runs the oldest pending I's weight
// gradient.
std::vector<PipelineAction> dualpipev_actions(const PipelineScheduleOptions& o, int rank) {
  const int pp = o.pp_size, m = o.microbatches;
  const int s0 = rank, s1 = o.num_stages() - 1 - rank;
  std::vector<int> next_f(o.num_stages()), next_b(o.num_stages());
  std::deque<std::pair<int, int>> pending_w;  // (stage, microbatch) of I's without their W
  std::vector<PipelineAction> out;
  auto add = [&](int stage, PipelineOp op) {
    if (op == PipelineOp::kForward) {
      out.push_back({stage, op, next_f[stage]++});
      return;
    }
    const int mb = next_b[stage]++;
    out.push_back({stage, op, mb});
    if (op == PipelineOp::kBackwardInput) pending_w.emplace_back(stage, mb);
  };
  auto overlap = [&](int forward_stage, int backward_stage) {
    add(forward_stage, PipelineOp::kForward);
    out.back().overlaps_next = true;
    add(backward_stage, PipelineOp::kFullBackward);
  };
  auto weight_if_pending = [&] {
    if (pending_w.empty()) return;
    out.push_back({pending_w.front().first, PipelineOp::kBackwardWeight, pending_w.front().second});
    pending_w.pop_front();
  };
  for (int i = 0; i < 2 * (pp - rank - 1); ++i) add(s0, PipelineOp::kForward);
  for (int i = 0; i < rank + 1; ++i) {
    add(s0, PipelineOp::kForward);
    add(s1, PipelineOp::kForward);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    add(s1, PipelineOp::kBackwardInput);
    weight_if_pending();
    add(s1, PipelineOp::kForward);
  }
  for (int i = 0; i < m - 2 * pp + rank + 1; ++i) {
    if (i == 0 && rank == pp - 1) {  // the last rank's first pair is not overlapped
      add(s0, PipelineOp::kForward);
      add(s1, PipelineOp::kFullBackward);
    } else {
      overlap(s0, s1);
    }
    overlap(s1, s0);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    add(s1, PipelineOp::kFullBackward);
    overlap(s1, s0);
  }
  bool split = false;
  const int tail = rank + 1;
  for (int i = 0; i < tail; ++i) {
    if (i == tail / 2 && rank % 2 == 1) split = true;
    add(s1, split ? PipelineOp::kBackwardInput : PipelineOp::kFullBackward);
    if (i == tail / 2 && rank % 2 == 0) split = true;
    add(s0, split ? PipelineOp::kBackwardInput : PipelineOp::kFullBackward);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    weight_if_pending();
    add(s0, split ? PipelineOp::kBackwardInput : PipelineOp::kFullBackward);
  }
  for (int i = 0; i < rank + 1; ++i) weight_if_pending();
  return out;
}

}  // namespace fullshard::pipeline_detail
