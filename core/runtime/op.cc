#include "core/runtime/op.h"

namespace fullshard {

const char* op_kind_name(OpKind k) {
  // clang-format off
  switch (k) {
#define FS_CASE(x) \
  case OpKind::x: return #x + 1;
    FS_CASE(kFill) FS_CASE(kInitParam) FS_CASE(kCopy) FS_CASE(kAdd) FS_CASE(kScale)
    FS_CASE(kEmbedding) FS_CASE(kEmbeddingBackward)
    FS_CASE(kRMSNorm) FS_CASE(kRMSNormBackward)
    FS_CASE(kLayerNorm) FS_CASE(kLayerNormBackward)
    FS_CASE(kLinear) FS_CASE(kLinearBackwardInput) FS_CASE(kLinearBackwardWeight)
    FS_CASE(kLinearBackwardBias)
    FS_CASE(kRoPE) FS_CASE(kRoPEBackward)
    FS_CASE(kAttention) FS_CASE(kAttentionBackward)
    FS_CASE(kSiLU) FS_CASE(kSiLUBackward) FS_CASE(kMul) FS_CASE(kMulBackward)
    FS_CASE(kGELU) FS_CASE(kGELUBackward)
    FS_CASE(kPositionEmbedding) FS_CASE(kPositionEmbeddingBackward)
    FS_CASE(kLogSoftmax) FS_CASE(kLogSoftmaxBackward)
    FS_CASE(kNllLoss) FS_CASE(kNllLossBackward)
    FS_CASE(kAllGatherCopyIn) FS_CASE(kAllGatherCopyOut) FS_CASE(kChunkCat)
    FS_CASE(kLoadBatch) FS_CASE(kSquaredNorm) FS_CASE(kSum) FS_CASE(kClipGradScale) FS_CASE(kAdamW)
    FS_CASE(kPowScalar) FS_CASE(kAddScalar) FS_CASE(kRsqrt) FS_CASE(kMulBroadcast)
    FS_CASE(kSumLastDim) FS_CASE(kSumLeadingDims) FS_CASE(kExpandLastDim)
    FS_CASE(kRoPEComplex) FS_CASE(kRoPEComplexBackward) FS_CASE(kRepeatKV) FS_CASE(kRepeatKVBackward)
    FS_CASE(kRotaryCosSin) FS_CASE(kNarrowCopy) FS_CASE(kRotateHalfCat)
    FS_CASE(kAttentionEfficient) FS_CASE(kAttentionEfficientBackward)
    FS_CASE(kAttentionCudnn) FS_CASE(kAttentionCudnnBackward)
    FS_CASE(kTransposeBlocks) FS_CASE(kRowMax) FS_CASE(kSubRow) FS_CASE(kExp) FS_CASE(kLog)
    FS_CASE(kNllVocabParallel) FS_CASE(kNllVocabParallelBackward)
    FS_CASE(kCompiledRMSNorm) FS_CASE(kCompiledAddRMSNorm) FS_CASE(kCompiledRMSNormBackward)
    FS_CASE(kCompiledRoPE) FS_CASE(kCompiledRoPEBackward) FS_CASE(kCompiledSiluMul)
    FS_CASE(kCompiledSiluMulBackward) FS_CASE(kCompiledResidualAdd)
    FS_CASE(kAllGatherMatmul) FS_CASE(kMatmulReduceScatter)
#undef FS_CASE
  }
  // clang-format on
  return "?";
}

bool op_uses_blas(OpKind k) {
  switch (k) {
    case OpKind::kLinear:
    case OpKind::kLinearBackwardInput:
    case OpKind::kLinearBackwardWeight:
    case OpKind::kAllGatherMatmul:
    case OpKind::kMatmulReduceScatter: return true;
    default: return false;
  }
}

bool is_compiled_region(OpKind k) {
  switch (k) {
    case OpKind::kCompiledRMSNorm:
    case OpKind::kCompiledAddRMSNorm:
    case OpKind::kCompiledRMSNormBackward:
    case OpKind::kCompiledRoPE:
    case OpKind::kCompiledRoPEBackward:
    case OpKind::kCompiledSiluMul:
    case OpKind::kCompiledSiluMulBackward:
    case OpKind::kCompiledResidualAdd: return true;
    default: return false;
  }
}

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
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
