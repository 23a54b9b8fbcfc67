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
// compiled kernel). iargs {granularity, axis, rows, cols, step}
struct Float8CastArgs {
  int64_t granularity = 0, axis = -1, rows = 0, cols = 0, step = 0;

  // Elements of the amax / scale tensor: 1, rows (axis -1) or cols (axis 0).
  int64_t scale_numel() const;
  void encode(OpCall& op) const { op.iargs = {granularity, axis, rows, cols, step}; }
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
