// GPipe and 1F1B as PyTorch's runtime runs them (`_step_microbatches` of ScheduleGPipe and
// Schedule1F1B in torch/distributed/pipelining/schedules.py): one stage per rank.
#include <algorithm>

#include "core/pipeline/schedule_generators.h"

namespace fullshard::pipeline_detail {

// Fill, then drain: every forward, then every backward, in microbatch order.
std::vector<PipelineAction> gpipe_actions(const PipelineScheduleOptions& o, int rank) {
  std::vector<PipelineAction> out;
  for (int m = 0; m < o.microbatches; ++m) out.push_back({rank, PipelineOp::kForward, m});
  for (int m = 0; m < o.microbatches; ++m) out.push_back({rank, PipelineOp::kFullBackward, m});
  return out;
}

// Warm-up forwards (pp - rank of them: the last stage one), then backward and forward in turn
// until the forwards run out, then the remaining backwards.
std::vector<PipelineAction> one_f_one_b_actions(const PipelineScheduleOptions& o, int rank) {
  std::vector<PipelineAction> out;
  const int warmup = std::min(o.microbatches, o.pp_size - rank);
  int fwd = 0, bwd = 0;
  while (fwd < warmup) out.push_back({rank, PipelineOp::kForward, fwd++});
  while (true) {
    out.push_back({rank, PipelineOp::kFullBackward, bwd++});
    if (fwd == o.microbatches) break;
    out.push_back({rank, PipelineOp::kForward, fwd++});
  }
  while (bwd < o.microbatches) out.push_back({rank, PipelineOp::kFullBackward, bwd++});
  return out;
}

}  // namespace fullshard::pipeline_detail
