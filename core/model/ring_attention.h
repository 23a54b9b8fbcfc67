#pragma once
// Ring attention: causal SDPA over a sequence split across the cp ranks, as PyTorch's context
// parallelism runs it for torchtitan (torch/distributed/tensor/experimental/_attention.py,
// _templated_ring_attention and _templated_ring_attention_backward). NOTE [Ring attention op
// sequence] in ring_attention.cc lists every op, buffer and collective; docs/context-parallel.md
// the whole design.
#include <string>

#include "core/model/autograd.h"
#include "core/model/context_parallel.h"
#include "core/model/ops.h"

namespace fullshard::ops::cp {

// scaled_dot_product_attention(q, k, v, is_causal=True) inside context_parallel: q [B, L, H*hd],
// k / v [B, L, Hkv*hd] this rank's L = S / cp tokens (its head and tail chunks, NOTE
// [Context-parallel layout]); s.seq is L. Returns O [B, L, H, hd] (SDPA's layout, as
// ops::attention). Saves q, k, v, O and the merged logsumexp [B, H, L] fp32, as the flash op's
// autograd node does; backward runs the ring backward.
Value ring_attention(ExecContext& c, Value q, Value k, Value v, const AttentionShape& s,
                     const ContextParallel& cp, const std::string& name);

}  // namespace fullshard::ops::cp
