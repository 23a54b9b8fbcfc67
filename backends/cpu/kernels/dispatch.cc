// run_kernel / has_kernel: argument checks common to every op, then a switch on OpKind.
#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/runtime/op_args.h"
#include "core/runtime/op_table.h"

namespace fullshard::cpu {

// The kinds the CPU kernels run, which CpuDevice::launch checks before queueing: every kind with a
// device kernel (not the host fills kLoadBatch / kInitParam, nor the simulator-only rows).
bool has_kernel(OpKind kind) { return has_device_kernel(kind); }

void run_kernel(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out) {
  using namespace detail;
  check_addresses(op, in, out);  // core/runtime/op_args.h
  switch (op.kind) {
    case OpKind::kFill: return fill(op, in, out);
    case OpKind::kCopy: return copy(op, in, out);
    case OpKind::kAdd: return add(op, in, out);
    case OpKind::kScale: return scale(op, in, out);
    case OpKind::kEmbedding: return embedding(op, in, out);
    case OpKind::kEmbeddingBackward: return embedding_backward(op, in, out);
    case OpKind::kRMSNorm: return rms_norm(op, in, out);
    case OpKind::kRMSNormBackward:
    case OpKind::kRMSNormBackwardInput:
    case OpKind::kRMSNormBackwardWeight: return rms_norm_backward(op, in, out);
    case OpKind::kLayerNorm: return layer_norm(op, in, out);
    case OpKind::kLayerNormBackward: return layer_norm_backward(op, in, out);
    case OpKind::kLinear: return linear(op, in, out);
    case OpKind::kLinearBackwardInput: return linear_backward_input(op, in, out);
    case OpKind::kLinearBackwardWeight: return linear_backward_weight(op, in, out);
    case OpKind::kLinearBackwardBias: return linear_backward_bias(op, in, out);
    case OpKind::kRoPE: return rope(op, in, out);
    case OpKind::kRoPEBackward: return rope_backward(op, in, out);
    case OpKind::kAttention: return attention(op, in, out);
    case OpKind::kAttentionBackward: return attention_backward(op, in, out);
    case OpKind::kAttentionEfficient:
    case OpKind::kAttentionCudnn: return attention(op, in, out);  // same maths, other saved layout
    case OpKind::kAttentionEfficientBackward:
    case OpKind::kAttentionCudnnBackward: return attention_backward(op, in, out);
    case OpKind::kSiLU: return silu(op, in, out);
    case OpKind::kSiLUBackward: return silu_backward(op, in, out);
    case OpKind::kMul: return mul(op, in, out);
    case OpKind::kMulBackward: return mul_backward(op, in, out);
    case OpKind::kGELU: return gelu(op, in, out);
    case OpKind::kGELUBackward: return gelu_backward(op, in, out);
    case OpKind::kPositionEmbedding: return position_embedding(op, in, out);
    case OpKind::kPositionEmbeddingBackward: return position_embedding_backward(op, in, out);
    case OpKind::kLogSoftmax: return log_softmax(op, in, out);
    case OpKind::kLogSoftmaxBackward: return log_softmax_backward(op, in, out);
    case OpKind::kNllLoss: return nll_loss(op, in, out);
    case OpKind::kNllLossBackward: return nll_loss_backward(op, in, out);
    case OpKind::kAllGatherCopyIn: return all_gather_copy_in(op, in, out);
    case OpKind::kAllGatherCopyOut: return all_gather_copy_out(op, in, out);
    case OpKind::kChunkCat: return chunk_cat(op, in, out);
    case OpKind::kSquaredNorm: return squared_norm(op, in, out);
    case OpKind::kSum: return sum(op, in, out);
    case OpKind::kClipGradScale: return clip_grad_scale(op, in, out);
    case OpKind::kAdamW: return adamw(op, in, out);
    case OpKind::kPowScalar: return pow_scalar(op, in, out);
    case OpKind::kAddScalar: return add_scalar(op, in, out);
    case OpKind::kRsqrt: return rsqrt(op, in, out);
    case OpKind::kMulBroadcast: return mul_broadcast(op, in, out);
    case OpKind::kSumLastDim: return sum_last_dim(op, in, out);
    case OpKind::kSumLeadingDims: return sum_leading_dims(op, in, out);
    case OpKind::kExpandLastDim: return expand_last_dim(op, in, out);
    case OpKind::kRoPEComplex: return rope_complex(op, in, out);
    case OpKind::kRoPEComplexBackward: return rope_complex_backward(op, in, out);
    case OpKind::kRepeatKV: return repeat_kv(op, in, out);
    case OpKind::kRepeatKVBackward: return repeat_kv_backward(op, in, out);
    case OpKind::kRotaryCosSin: return rotary_cos_sin(op, in, out);
    case OpKind::kNarrowCopy: return narrow_copy(op, in, out);
    case OpKind::kRotateHalfCat: return rotate_half_cat(op, in, out);
    case OpKind::kTransposeBlocks: return transpose_blocks(op, in, out);
    case OpKind::kRowMax: return row_max(op, in, out);
    case OpKind::kSubRow: return sub_row(op, in, out);
    case OpKind::kExp: return exp_kernel(op, in, out);
    case OpKind::kLog: return log_kernel(op, in, out);
    case OpKind::kNllVocabParallel: return nll_vocab_parallel(op, in, out);
    case OpKind::kNllVocabParallelBackward: return nll_vocab_parallel_backward(op, in, out);
    case OpKind::kCompiledRMSNorm: return compiled_rms_norm(op, in, out);
    case OpKind::kCompiledAddRMSNorm: return compiled_add_rms_norm(op, in, out);
    case OpKind::kCompiledRMSNormBackward: return compiled_rms_norm_backward(op, in, out);
    case OpKind::kCompiledRoPE:
    case OpKind::kCompiledRoPEBackward: return compiled_rope(op, in, out);
    case OpKind::kCompiledSiluMul: return compiled_silu_mul(op, in, out);
    case OpKind::kCompiledSiluMulBackward: return compiled_silu_mul_backward(op, in, out);
    case OpKind::kCompiledResidualAdd: return compiled_residual_add(op, in, out);
    case OpKind::kSdpaMerge: return sdpa_merge(op, in, out);
    case OpKind::kSeqRowsAdd: return seq_rows_add(op, in, out);
    case OpKind::kSoftmax: return moe_softmax(op, in, out);
    case OpKind::kSoftmaxBackward: return moe_softmax_backward(op, in, out);
    case OpKind::kSigmoid: return moe_sigmoid(op, in, out);
    case OpKind::kSigmoidBackward: return moe_sigmoid_backward(op, in, out);
    case OpKind::kTopK: return moe_topk(op, in, out);
    case OpKind::kTopKBackward: return moe_topk_backward(op, in, out);
    case OpKind::kRouteNorm: return moe_route_norm(op, in, out);
    case OpKind::kRouteNormBackward: return moe_route_norm_backward(op, in, out);
    case OpKind::kHistogram: return moe_histogram(op, in, out);
    case OpKind::kExpertCapacity: return moe_expert_capacity(op, in, out);
    case OpKind::kRouterChoice: return moe_router_choice(op, in, out);
    case OpKind::kGatherScores: return moe_gather_scores(op, in, out);
    case OpKind::kExpertLoadStack: return moe_expert_load_stack(op, in, out);
    case OpKind::kExpertBiasUpdate: return moe_expert_bias_update(op, in, out);
    case OpKind::kAddSumRows: return moe_add_sum_rows(op, in, out);
    case OpKind::kMoeAuxLoss: return moe_aux_loss(op, in, out);
    case OpKind::kMoeAuxLossBackward: return moe_aux_loss_backward(op, in, out);
    case OpKind::kWeightedSum: return moe_weighted_sum(op, in, out);
    case OpKind::kWeightedSumBackward: return moe_weighted_sum_backward(op, in, out);
    case OpKind::kArgsort: return moe_argsort(op, in, out);
    case OpKind::kFloorDivide: return moe_floor_divide(op, in, out);
    case OpKind::kGatherRows: return moe_gather_rows(op, in, out);
    case OpKind::kScatterRows: return moe_scatter_rows(op, in, out);
    case OpKind::kIndexAddRows: return moe_index_add_rows(op, in, out);
    case OpKind::kPadRow: return moe_pad_row(op, in, out);
    case OpKind::kPermuteIndices: return moe_permute_indices(op, in, out);
    case OpKind::kGroupedMM: return grouped_mm(op, in, out);
    case OpKind::kGroupedMMBackwardInput: return grouped_mm_backward_input(op, in, out);
    case OpKind::kGroupedMMBackwardWeight: return grouped_mm_backward_weight(op, in, out);
    case OpKind::kFloat8Abs: return float8_abs(op, in, out);
    case OpKind::kFloat8Amax: return float8_amax(op, in, out);
    case OpKind::kFloat8Scale: return float8_scale(op, in, out);
    case OpKind::kFloat8Cast: return float8_cast(op, in, out);
    case OpKind::kNF4Quantize: return nf4_quantize(op, in, out);
    case OpKind::kNF4Dequantize: return nf4_dequantize(op, in, out);
    case OpKind::kScaledMM:
    case OpKind::kScaledMMBackwardInput:
    case OpKind::kScaledMMBackwardWeight: return scaled_mm(op, in, out);
    // The host fills run in CpuDevice::launch; the simulator-only kinds are refused there
    // (backends/common/device_kernels.h). The KernelDispatch test reaches every other kind.
    default: break;
  }
  FULLSHARD_CHECK(false, where(op) + "no CPU kernel for this op kind");
}

}  // namespace fullshard::cpu
