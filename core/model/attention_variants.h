#pragma once
// scaled_dot_product_attention on its efficient (CUTLASS memory-efficient) and cuDNN backends
// (model.implementation attention = efficient | cudnn; docs/ops.md). The maths is flash's
// (ops::attention); what autograd saves and the backward's scratch differ (NOTE [SDPA backends]
// in attention_variants.cc).
#include <string>

#include "core/model/implementation.h"
#include "core/model/ops.h"

namespace fullshard::ops {

// Causal attention of q [B, S, H, hd], k / v [B, S, Hkv, hd] on `backend` (kEfficient or kCudnn;
// kFlash calls ops::attention). kEfficient needs Hkv == H (PyTorch's efficient backend has no
// GQA; the scenario parser refuses the combination, gqa = repeat_kv expands k / v first).
Value attention_sdpa(ExecContext& c, Value q, Value k, Value v, const AttentionShape& s,
                     AttentionImpl backend, const std::string& name);

// Elements of one logsumexp row the backend saves (efficient: S rounded up to 32).
int64_t attention_lse_len(AttentionImpl backend, int64_t seq);

}  // namespace fullshard::ops
