#pragma once
// How many CUDA kernels, and how much device-memory traffic, PyTorch eager spends on one op that
// fullshard records as a single fused kernel (NOTE [Eager decomposition]).
#include "core/runtime/op.h"

namespace fullshard::sim {

struct EagerKernels {
  int kernels = 1;       // CUDA kernels eager PyTorch launches for the op
  double traffic = 1;    // device-memory bytes moved / the fused op's recorded bytes
};

// NOTE [Eager decomposition]: the recorded program holds one kernel per op, with the bytes a
// fused kernel moves. torchtitan's Llama (as benchmarked in 2024, models/llama/model.py @
// 1ea476e9) writes two of them as chains of eager ops:
//  - RMSNorm._norm(x.float()).type_as(x) * weight: x.float() (read 2 + write 4 B/element),
//    pow(2) (4 + 4), mean (4), add eps + rsqrt (per row), x * rsqrt (4 + 4), type_as (4 + 2),
//    * weight (2 + 2): 7 kernels and ~36 B/element where the fused kernel moves ~4;
//    autograd replays each step's backward (~12 kernels, ~70 B/element against ~6 fused);
//  - apply_rotary_emb: xq.float() (2 + 4), complex multiply by freqs_cis (4 + 4),
//    type_as (4 + 2): 3 kernels and ~20 B/element against ~4 fused; the backward the same.
// Everything else (SiLU, adds, casts, embedding, log-softmax / NLL on fp32 logits, AdamW's
// per-parameter work) is one kernel at its recorded bytes. A program recorded with
// model.implementation rms_norm = eager emits the RMSNorm chain itself (PowScalar, SumLastDim,
// AddScalar, Rsqrt, MulBroadcast, ...: one kernel each at its bytes, NOTE [Eager RMSNorm] in
// core/model/eager_norm.cc), so this table applies only to kRMSNorm / kRoPE, which such
// programs do not launch for those ops. Applies to GPUs only: the CPU backend runs
// fullshard's own fused kernels.
EagerKernels eager_kernels(OpKind kind);

}  // namespace fullshard::sim
