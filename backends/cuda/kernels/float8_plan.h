#pragma once
// Host-side planning of torchao's float8 casts on the CUDA backend (kFloat8Abs, kFloat8Amax,
// kFloat8Scale, kFloat8Cast; docs/float8.md): plain C++, tested without a GPU
// (tests/gpu/float8_plan_test.cc). The kernels are float8.cu; float8_dispatch.cc calls them.
#include <cstdint>

#include "backends/cuda/kernels/index_math.h"
#include "core/runtime/float8_args.h"
#include "core/runtime/op.h"

namespace fullshard::cuda {

// NOTE [Float8 casts on the GPU]: each kind computes what the CPU kernel computes (NOTE [Float8
// on the CPU], backends/cpu/kernels/float8.cc), bit for bit:
// - abs and the cast's steps 1-3 are elementwise fp32 arithmetic (x.to(fp32), x * scale without
//   contraction, clamp keeping NaN); step 4 and the compiled cast convert with the core's
//   FULLSHARD_HOST_DEVICE float_to_float8 (core/tensor/float8.h), the code the CPU runs.
// - amax: the max of |x| is exact in any order, so the reduction is a max over the fp32 bit
//   patterns of |x| (non-negative, so bits order as values; every NaN sorts above +inf, so NaN
//   propagates). Per row: one block per row, stored. Tensorwise and per column: the output is
//   zeroed, then each block max-es its partial into it atomically in the output's dtype (a
//   rounding to bf16 / fp16 is monotonic, so the max of rounded partials is the rounded max).
//   NaN payloads may differ from the CPU's (which keeps the first NaN it meets).
// - scale: amax_to_scale in float64 (IEEE division and product, then .to(float32)), and with
//   power-of-two scales exp2f(floorf(log2f(s))) with CUDA's functions; glibc's log2f (the
//   CPU's) and CUDA's may round differently within an ulp or so below a power of two, where
//   the two backends' power-of-two scales could differ (docs/float8.md).
// Operands are checked here as the CPU kernel checks them, before anything is enqueued.
struct Float8CastPlan {
  Float8CastArgs a;
  int64_t n = 0, scale_numel = 0;
  int x_dtype = kF32, out_dtype = kF32;  // DCode of input 0 and output 0
  int scale_in_dtype = kF32;             // kFloat8Scale: the amax's dtype
  int target = 0;                        // 0 e4m3fn, 1 e5m2
  bool zero_output_first = false;        // kFloat8Amax: tensorwise or per column (atomics)
  int64_t column_rows_per_block = 0;     // kFloat8Amax per column: rows each block reduces
};

// Throws InternalError naming the op on a bad operand (arity, dtype, size).
Float8CastPlan plan_float8_cast(const OpCall& op);

}  // namespace fullshard::cuda
