#pragma once
// model.implementation compile = true: a Llama TransformerBlock as torch.compile(block,
// fullgraph=True) runs it (torchtitan apply_compile). The GEMMs and SDPA are the eager ops
// (inductor's extern kernels); the pointwise work between them is a few fused regions, one
// kernel each, and each region's autograd node saves what AOTAutograd's min-cut partitioner
// saves (NOTE [Compiled block] in compiled_block.cc; measured by tools/measure/compiled_block.py).
#include <string>
#include <utility>

#include "core/model/autograd.h"
#include "core/runtime/rope_args.h"

namespace fullshard::ops::compiled {

// A region's output and the autograd handle of a value the region reads but does not store
// (the block input x on the residual path, h = x + a): its gradient flows back into the
// region's backward kernel instead of through a separate accumulate.
struct RegionOut {
  Value y;
  Value residual;
};

// attention_norm: y = RMSNorm(x) * w (kCompiledRMSNorm); residual carries x to the add.
RegionOut rms_norm(ExecContext& c, Value x, const Param& weight, double eps,
                   const std::string& name);

// ffn_norm of h = x + a (kCompiledAddRMSNorm): h is never stored; `residual` is h's handle
// (its tensor is a; residual_add reads x and a again). `x` is rms_norm's residual.
RegionOut add_rms_norm(ExecContext& c, Value x, Value a, const Param& weight, double eps,
                       const std::string& name);

// RoPE of q and k in one kernel, in place (kCompiledRoPE); adjacent pairs for rope = complex.
std::pair<Value, Value> rope(ExecContext& c, Value q, Value k, int64_t head_dim,
                             const RopeParams& freqs, bool adjacent, const std::string& name);

// silu(a) * b (kCompiledSiluMul); saves a and b, recomputes silu(a) in backward.
Value silu_mul(ExecContext& c, Value a, Value b, const std::string& name);

// out = x + a + f (kCompiledResidualAdd), written over f; `h` is add_rms_norm's residual and
// x, a the tensors it was made of.
Value residual_add(ExecContext& c, Value h, const Tensor& x, const Tensor& a, Value f,
                   const std::string& name);

}  // namespace fullshard::ops::compiled
