// Looped schedules (stage s on rank s % pp): LoopedBFS, Interleaved1F1B and
// InterleavedZeroBubble (ZB1P) as torch/distributed/pipelining/schedules.py builds their
// `pipeline_order` (ScheduleLoopedBFS, _get_warmup_ops, _get_1f1b_rank_ops).
#include <algorithm>

#include "core/pipeline/schedule_generators.h"

namespace fullshard::pipeline_detail {

// Breadth first: each local stage runs every microbatch forward, earliest stage first; then
// the backwards run latest stage first, last microbatch first.
std::vector<PipelineAction> looped_bfs_actions(const PipelineScheduleOptions& o, int rank) {
  const std::vector<int> stages = pipeline_rank_stages(o, rank);
  std::vector<PipelineAction> out;
  for (int s : stages)
    for (int m = 0; m < o.microbatches; ++m) out.push_back({s, PipelineOp::kForward, m});
  for (auto s = stages.rbegin(); s != stages.rend(); ++s)
    for (int m = o.microbatches - 1; m >= 0; --m) out.push_back({*s, PipelineOp::kFullBackward, m});
  return out;
}

// Depth first in rounds of `per_round` microbatches: a warm-up of forwards (the last rank's
// covers all but its last local stage, two more per hop away for 1F1B, one more for ZB1P),
// a steady phase of one forward + one backward per slot, and a cool-down of backwards. Slot
// `slot` runs local stage (slot / per_round) % local forward, counted from the last local
// stage backward. ZB1P splits each backward into I and W and runs rank r's W one slot after
// its first r backwards, then the rest at the end.
std::vector<PipelineAction> interleaved_actions(const PipelineScheduleOptions& o, int rank,
                                                bool zero_bubble) {
  const int local = o.stages_per_rank, pp = o.pp_size, m = o.microbatches;
  const int per_round = m / std::max(1, m / pp);
  const int hop_cost = zero_bubble ? 1 : 2;
  const int warmup = std::min((local - 1) * per_round + hop_cost * (pp - 1 - rank), m * local);
  const int steady = m * local - warmup;
  const int slots = warmup + steady + warmup;  // the cool-down has as many slots as the warm-up

  auto forward_stage = [&](int slot) { return (slot / per_round) % local * pp + rank; };
  auto backward_stage = [&](int slot) {
    return (local - 1 - (slot - warmup) / per_round % local) * pp + rank;
  };
  std::vector<int> next_f(o.num_stages()), next_b(o.num_stages()), next_w(o.num_stages());
  const PipelineOp backward = zero_bubble ? PipelineOp::kBackwardInput : PipelineOp::kFullBackward;
  std::vector<int> backward_slots;
  size_t weights_done = 0;
  std::vector<PipelineAction> out;
  auto weight = [&] {
    const int s = backward_stage(backward_slots[weights_done++]);
    out.push_back({s, PipelineOp::kBackwardWeight, next_w[s]++});
  };
  for (int slot = 0; slot < slots; ++slot) {
    if (slot < warmup + steady) {
      const int s = forward_stage(slot);
      out.push_back({s, PipelineOp::kForward, next_f[s]++});
      if (slot < warmup) continue;
    }
    const int s = backward_stage(slot);
    out.push_back({s, backward, next_b[s]++});
    backward_slots.push_back(slot);
    if (zero_bubble && slot - warmup >= rank) weight();
  }
  while (zero_bubble && weights_done < backward_slots.size()) weight();
  return out;
}

}  // namespace fullshard::pipeline_detail
