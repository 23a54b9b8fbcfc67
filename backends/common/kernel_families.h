#pragma once
// Families of op kinds that the real backends run unevenly: the CPU backend runs every device
// kind of the op table; the CUDA backend does not run the context-parallel kinds yet
// (cuda::has_kernel), runs float8's since issue 32's CUDA casts and the MoE kinds since issue
// 30's CUDA kernels (both built, not yet run on a GPU: docs/float8.md, docs/moe.md). One list
// each, shared by both backends and their tests.
#include "core/runtime/op.h"

namespace fullshard::backends {

// The mixture-of-experts kinds (docs/moe.md).
inline bool is_moe_kind(OpKind kind) {
  switch (kind) {
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxBackward:
    case OpKind::kSigmoid:
    case OpKind::kSigmoidBackward:
    case OpKind::kTopK:
    case OpKind::kTopKBackward:
    case OpKind::kRouteNorm:
    case OpKind::kRouteNormBackward:
    case OpKind::kHistogram:
    case OpKind::kExpertCapacity:
    case OpKind::kWeightedSum:
    case OpKind::kWeightedSumBackward:
    case OpKind::kArgsort:
    case OpKind::kFloorDivide:
    case OpKind::kGatherRows:
    case OpKind::kScatterRows:
    case OpKind::kIndexAddRows:
    case OpKind::kPadRow:
    case OpKind::kPermuteIndices:
    case OpKind::kGroupedMM:
    case OpKind::kGroupedMMBackwardInput:
    case OpKind::kGroupedMMBackwardWeight: return true;
    default: return false;
  }
}

// Load balancing: DeepSeek-V3's aux-loss-free expert bias and group-limited routing (NOTE
// [Expert bias] in core/model/expert_bias.h) and the auxiliary loss (NOTE [Auxiliary
// load-balancing loss] in core/model/moe_aux_loss.h): the CPU backend runs them; the CUDA
// backend has no kernel yet and the launcher refuses model.moe.load_balance "expert_bias" /
// "aux_loss" and num_expert_groups > 1 there.
inline bool is_load_balance_kind(OpKind kind) {
  return kind == OpKind::kRouterChoice || kind == OpKind::kGatherScores ||
         kind == OpKind::kExpertLoadStack || kind == OpKind::kExpertBiasUpdate ||
         kind == OpKind::kAddSumRows || kind == OpKind::kMoeAuxLoss ||
         kind == OpKind::kMoeAuxLossBackward;
}

// torchao's float8 kinds (docs/float8.md).
inline bool is_float8_kind(OpKind kind) {
  switch (kind) {
    case OpKind::kFloat8Abs:
    case OpKind::kFloat8Amax:
    case OpKind::kFloat8Scale:
    case OpKind::kFloat8Cast:
    case OpKind::kScaledMM:
    case OpKind::kScaledMMBackwardInput:
    case OpKind::kScaledMMBackwardWeight: return true;
    default: return false;
  }
}

// Context parallelism's ring-attention kinds (docs/context-parallel.md; the CUDA backend's
// context_parallel_dispatch.cc).
inline bool is_context_parallel_kind(OpKind kind) {
  return kind == OpKind::kSdpaMerge || kind == OpKind::kSeqRowsAdd;
}

// QLoRA's NF4 kinds (docs/qlora.md): the CPU backend runs them; the CUDA backend has no kernel
// and the launcher refuses training.frozen_dtype "nf4" there.
inline bool is_nf4_kind(OpKind kind) {
  return kind == OpKind::kNF4Quantize || kind == OpKind::kNF4Dequantize;
}

}  // namespace fullshard::backends
