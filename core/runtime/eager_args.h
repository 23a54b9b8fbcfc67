#pragma once
// The typed arguments of the eager decompositions' ops (model.implementation; docs/ops.md
// "Implementation variants") and of the loss-parallel row ops, decoded and checked once here
// for the CPU reference and the CUDA kernels (NOTE [One op table] in op_table.h). Failures name
// the op.
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

// kScale (factor), kPowScalar (exponent), kAddScalar (addend): one input, one output of its
// size.  fargs {value}
struct ScalarArgs {
  double value = 0;
  int64_t numel = 0;

  void encode(OpCall& op) const { op.fargs = {value}; }
  static ScalarArgs decode(const OpCall& op);
};

// kMulBroadcast: a [rows, D] * b -> out [rows, D], b per row [rows] (mode 0), per column [D]
// (mode 1) or per head [rows, head_dim] (mode 2).  iargs {mode, D[, head_dim]}
struct MulBroadcastArgs {
  enum Mode : int64_t { kPerRow = 0, kPerColumn = 1, kPerHead = 2 };
  Mode mode = kPerRow;  // any other value decodes as kPerRow
  int64_t dim = 0, head_dim = 0;
  int64_t rows = 0;

  void encode(OpCall& op) const;
  static MulBroadcastArgs decode(const OpCall& op);
};

// Rows of `dim` elements: kSumLastDim ([R, D] -> [R], times scale), kSumLeadingDims ([R, D] ->
// [D]), kExpandLastDim ([R] -> [R, D], times scale), kRowMax ([R, D] -> [R]), kSubRow
// ((a [R, D], b [R]) -> [R, D]).  iargs {D}; fargs {scale} (kExpandLastDim: required;
// kSumLastDim: optional, 1 when absent)
struct RowArgs {
  int64_t dim = 0, rows = 0;
  double scale = 1;
  bool has_scale = false;

  void encode(OpCall& op) const;
  static RowArgs decode(const OpCall& op);
};

}  // namespace fullshard
