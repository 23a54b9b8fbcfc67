#include "core/runtime/op.h"

#include "core/runtime/op_table.h"

namespace fullshard {

const char* op_kind_name(OpKind k) {
  return static_cast<size_t>(k) < kOpKindCount ? op_info(k).name : "?";
}

bool op_uses_blas(OpKind k) { return op_info(k).has(kOpBlas); }

bool is_compiled_region(OpKind k) { return op_info(k).has(kOpCompiled); }

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kAllToAll: return "all_to_all";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kPremulSum: return "premul_sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

}  // namespace fullshard
