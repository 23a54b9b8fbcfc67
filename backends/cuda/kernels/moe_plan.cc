#include "backends/cuda/kernels/moe_plan.h"

#include <climits>
#include <string>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/moe_args.h"

namespace fullshard::cuda {

namespace {

void fill_dtypes(const OpCall& op, MoePlan& p) {
  for (size_t i = 0; i < op.inputs.size() && i < 3; ++i) p.d_in[i] = plan::dcode(op.inputs[i].meta.dtype);
  for (size_t i = 0; i < op.outputs.size() && i < 2; ++i)
    p.d_out[i] = plan::dcode(op.outputs[i].meta.dtype);
}

void check_smem(const OpCall& op, size_t bytes, const std::string& what) {
  FULLSHARD_CHECK(bytes <= kMoeMaxSmem, plan::where(op) + what + " need " + std::to_string(bytes) +
                                            " bytes of shared memory, more than the " +
                                            std::to_string(kMoeMaxSmem) + " a block gets");
}

}  // namespace

int moe_copy_unit(int64_t row_bytes, const void* src, const void* dst) {
  const auto a = reinterpret_cast<uintptr_t>(src), b = reinterpret_cast<uintptr_t>(dst);
  for (int u : {16, 8, 4, 2})
    if (row_bytes % u == 0 && a % u == 0 && b % u == 0) return u;
  return 1;
}

MoePlan plan_moe(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out) {
  MoePlan p;
  switch (op.kind) {
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxBackward:
    case OpKind::kSigmoid:
    case OpKind::kSigmoidBackward:
    case OpKind::kTopK:
    case OpKind::kTopKBackward:
    case OpKind::kRouteNorm:
    case OpKind::kRouteNormBackward:
    case OpKind::kHistogram:
    case OpKind::kWeightedSum:
    case OpKind::kWeightedSumBackward: {
      const RouterArgs a = RouterArgs::decode(op);  // core/runtime/moe_args.h
      p.tokens = a.tokens, p.experts = a.experts, p.top_k = a.top_k;
      fill_dtypes(op, p);
      switch (op.kind) {
        case OpKind::kHistogram:
          check_smem(op, static_cast<size_t>(a.experts) * sizeof(int), "the experts' counts");
          break;
        case OpKind::kWeightedSum:
          p.dim = op.inputs[1].meta.numel() / std::max<int64_t>(1, a.tokens * a.top_k);
          break;
        case OpKind::kWeightedSumBackward:
          p.dim = op.inputs[0].meta.numel() / std::max<int64_t>(1, a.tokens);
          break;
        default: break;
      }
      return p;
    }
    case OpKind::kExpertCapacity: {  // fp32 scores and int64 indices by the decode
      const CapacityArgs a = CapacityArgs::decode(op);
      p.tokens = a.tokens, p.experts = a.experts, p.top_k = a.top_k;
      p.capacity = a.capacity, p.policy = static_cast<int>(a.policy);
      return p;
    }
    case OpKind::kArgsort:
    case OpKind::kFloorDivide:
    case OpKind::kGatherRows:
    case OpKind::kScatterRows:
    case OpKind::kIndexAddRows:
    case OpKind::kPadRow: {
      const RowIndexArgs a = RowIndexArgs::decode(op);
      p.rows = a.rows, p.width = a.width, p.divisor = a.divisor;
      fill_dtypes(op, p);
      p.entries = op.inputs.size() > 1 ? op.inputs[1].meta.numel() : op.inputs[0].meta.numel();
      if (op.kind == OpKind::kArgsort || op.kind == OpKind::kFloorDivide) return p;
      const DType d = op.outputs[0].meta.dtype;
      if (op.kind == OpKind::kIndexAddRows) return p;
      p.row_bytes = a.width * static_cast<int64_t>(dtype_size(d));
      p.out_rows = op.outputs[0].meta.numel() / a.width;
      p.unit = moe_copy_unit(p.row_bytes, in.empty() ? nullptr : in[0], out.empty() ? nullptr : out[0]);
      p.slots = op.kind == OpKind::kScatterRows && p.row_bytes % 4 == 0 &&
                reinterpret_cast<uintptr_t>(out.empty() ? nullptr : out[0]) % 4 == 0 &&
                p.entries < INT_MAX;
      return p;
    }
    case OpKind::kPermuteIndices: {
      const PermuteIndicesArgs a = PermuteIndicesArgs::decode(op);
      p.tokens = a.tokens, p.experts = a.experts, p.align = a.align;
      p.padded_rows = a.padded_rows();
      p.n_counts = op.inputs[0].meta.numel();
      fill_dtypes(op, p);
      p.smem = static_cast<size_t>(2 * p.n_counts + a.experts) * sizeof(int64_t);
      check_smem(op, p.smem, "the counts, their starts and the group ends");
      return p;
    }
    case OpKind::kGroupedMM:
    case OpKind::kGroupedMMBackwardInput:
    case OpKind::kGroupedMMBackwardWeight: {
      const GroupedMmArgs a = GroupedMmArgs::decode(op);
      p.rows = a.rows, p.k = a.k, p.n = a.n, p.experts = a.experts;
      fill_dtypes(op, p);
      FULLSHARD_CHECK(a.experts <= 65535,
                      plan::where(op) + "more than 65535 experts (the weight gradient's grid)");
      return p;
    }
    default: break;
  }
  FULLSHARD_CHECK(false, plan::where(op) + "is not a mixture-of-experts kind");
  return p;
}

}  // namespace fullshard::cuda
