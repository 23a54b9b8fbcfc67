#pragma once
// Argument structs of the float8 training kinds (op_kinds.def, docs/float8.md): the amax, scale
// and cast of one operand, and torch._scaled_mm. encode / decode as every *_args.h
// (core/runtime/op_args.h).
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

// kFloat8Abs, kFloat8Amax, kFloat8Scale, kFloat8Cast. granularity 0: tensorwise (one scale),
// 1: axiswise; axis: the reduced dim for axiswise, -1 (one scale per row) or 0 (per column);
// rows / cols: the operand as a 2-D [rows, cols] tensor; step: the eager kernel (0 = the one
// compiled kernel); target: the float8 format cast to (0 e4m3fn, 1 e5m2), which sets the
// scale's fp8 max; pow2: round_scales_to_power_of_2. The simulator prices none of them; a real
// backend computes with them (backends/cpu/kernels/float8.cc).
// iargs {granularity, axis, rows, cols, step, target, pow2}
struct Float8CastArgs {
  int64_t granularity = 0, axis = -1, rows = 0, cols = 0, step = 0, target = 0, pow2 = 0;

  // Elements of the amax / scale tensor: 1, rows (axis -1) or cols (axis 0).
  int64_t scale_numel() const;
  void encode(OpCall& op) const { op.iargs = {granularity, axis, rows, cols, step, target, pow2}; }
  DType target_dtype() const { return target == 1 ? DType::kFloat8E5M2 : DType::kFloat8E4M3FN; }
  static Float8CastArgs decode(const OpCall& op);
};

// kScaledMM (x [M, K] . w [N, K]^T), kScaledMMBackwardInput (g [M, N] . w -> [M, K]),
// kScaledMMBackwardWeight (g^T . x -> [N, K]): both operands float8, their scales fp32.
// iargs {M, K, N}
struct ScaledMmArgs {
  int64_t m = 0, k = 0, n = 0;

  void encode(OpCall& op) const { op.iargs = {m, k, n}; }
  static ScaledMmArgs decode(const OpCall& op);
};

}  // namespace fullshard
