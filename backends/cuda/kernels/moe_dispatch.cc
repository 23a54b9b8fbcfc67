// launch_moe: the mixture-of-experts kinds on the CUDA backend (docs/moe.md). The plan decodes
// the op with core's argument structs (moe_plan.h, NOTE [MoE kernels on the GPU]); then one
// launcher of moe_router.cu, moe_reorder.cu or moe_grouped_mm.cu. Everything is checked before
// anything is enqueued.
#include <string>

#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/moe_launch.h"
#include "backends/cuda/kernels/moe_plan.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {

void launch_moe(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                const KernelContext& ctx) {
  const MoePlan p = plan_moe(op, in, out);
  const cudaStream_t s = ctx.stream;
  const int* di = p.d_in;
  const int* dout = p.d_out;
  auto idx_in = [&](size_t i) { return static_cast<const int64_t*>(in[i]); };
  switch (op.kind) {
    case OpKind::kSoftmax:
      return launch::moe_softmax(in[0], di[0], out[0], dout[0], p.tokens, p.experts, s);
    case OpKind::kSoftmaxBackward:
      return launch::moe_softmax_backward(in[0], di[0], in[1], di[1], out[0], dout[0], p.tokens,
                                          p.experts, s);
    case OpKind::kSigmoid:
      return launch::moe_sigmoid(in[0], di[0], out[0], dout[0], p.tokens * p.experts, s);
    case OpKind::kSigmoidBackward:
      return launch::moe_sigmoid_backward(in[0], di[0], in[1], di[1], out[0], dout[0],
                                          p.tokens * p.experts, s);
    case OpKind::kTopK:
      return launch::moe_topk(in[0], di[0], out[0], dout[0], static_cast<int64_t*>(out[1]),
                              p.tokens, p.experts, p.top_k, s);
    case OpKind::kTopKBackward:
      return launch::moe_topk_backward(in[0], di[0], idx_in(1), out[0], dout[0], p.tokens,
                                       p.experts, p.top_k, s);
    case OpKind::kRouteNorm:
      return launch::moe_route_norm(in[0], di[0], out[0], dout[0], out[1], dout[1], p.tokens,
                                    p.top_k, s);
    case OpKind::kRouteNormBackward:
      return launch::moe_route_norm_backward(in[0], di[0], in[1], di[1], in[2], di[2], out[0],
                                             dout[0], p.tokens, p.top_k, s);
    case OpKind::kHistogram:
      return launch::moe_histogram(idx_in(0), p.tokens * p.top_k, out[0], dout[0], p.experts, s);
    case OpKind::kExpertCapacity:
      return launch::moe_expert_capacity(static_cast<const float*>(in[0]), idx_in(1),
                                         static_cast<int64_t*>(out[0]), p.tokens * p.top_k,
                                         p.experts, p.capacity, p.policy, s);
    case OpKind::kWeightedSum:
      return launch::moe_weighted_sum(in[0], di[0], in[1], di[1], out[0], dout[0], p.tokens,
                                      p.top_k, p.dim, s);
    case OpKind::kWeightedSumBackward:
      return launch::moe_weighted_sum_backward(in[0], di[0], in[1], di[1], in[2], di[2], out[0],
                                               dout[0], out[1], dout[1], p.tokens, p.top_k, p.dim,
                                               s);
    case OpKind::kArgsort:
      return launch::moe_argsort(idx_in(0), static_cast<int64_t*>(out[0]), p.entries, s);
    case OpKind::kFloorDivide:
      return launch::moe_floor_divide(idx_in(0), static_cast<int64_t*>(out[0]), p.entries,
                                      p.divisor, s);
    case OpKind::kGatherRows:
      return launch::moe_gather_rows(in[0], idx_in(1), out[0], p.entries, p.rows, p.row_bytes,
                                     p.unit, s);
    case OpKind::kScatterRows:
      return launch::moe_scatter_rows(in[0], idx_in(1), out[0], p.entries, p.rows, p.row_bytes,
                                      p.unit, p.slots, s);
    case OpKind::kIndexAddRows:
      return launch::moe_index_add_rows(in[0], di[0], idx_in(1), out[0], dout[0], p.entries,
                                        p.rows, p.width, s);
    case OpKind::kPadRow:
      return launch::moe_pad_row(in[0], out[0], p.rows, p.out_rows, p.row_bytes, p.unit, s);
    case OpKind::kPermuteIndices:
      return launch::moe_permute_indices(in[0], di[0], p.n_counts, p.experts, p.align,
                                         p.padded_rows, static_cast<int64_t*>(out[0]),
                                         static_cast<int64_t*>(out[1]), p.smem, s);
    case OpKind::kGroupedMM:
      return launch::moe_grouped_mm(launch::GroupedMm::kForward, in[0], di[0], in[1], di[1],
                                    idx_in(2), out[0], dout[0], p.rows, p.k, p.n, p.experts, s);
    case OpKind::kGroupedMMBackwardInput:
      return launch::moe_grouped_mm(launch::GroupedMm::kBackwardInput, in[0], di[0], in[1], di[1],
                                    idx_in(2), out[0], dout[0], p.rows, p.k, p.n, p.experts, s);
    case OpKind::kGroupedMMBackwardWeight:
      return launch::moe_grouped_mm(launch::GroupedMm::kBackwardWeight, in[0], di[0], in[1],
                                    di[1], idx_in(2), out[0], dout[0], p.rows, p.k, p.n,
                                    p.experts, s);
    default: break;
  }
  FULLSHARD_CHECK(false, plan::where(op) + "is not a mixture-of-experts kind");
}

}  // namespace fullshard::cuda
