#pragma once
// The typed arguments and operand layout of the normalisation ops, eager and compiled, decoded
// and checked once here for the CPU reference and the CUDA kernels (NOTE [One op table] in
// op_table.h). Rows of `dim` = x's last dim; statistics (mean, rstd) are fp32 [rows].
#include <cstddef>
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

// kRMSNorm (x, w) -> (y, rstd); kLayerNorm (x, w, b) -> (y, mean, rstd); kCompiledRMSNorm
// (x, w) -> (y, rstd); kCompiledAddRMSNorm (x, a, w) -> (y, rstd), the norm of x + a.
//   fargs {eps}
struct NormArgs {
  double eps = 0;
  int64_t rows = 0, dim = 0;
  size_t weight = 1;  // the input index of w

  void encode(OpCall& op) const { op.fargs = {eps}; }
  static NormArgs decode(const OpCall& op);
};

// The backward of kRMSNorm ((g, x, rstd, w) -> (g_x, g_w)) and kLayerNorm ((g, x, mean, rstd, w)
// -> (g_x, g_w, g_b)), and kRMSNormBackward's parts kRMSNormBackwardInput ((g, x, rstd, w) ->
// g_x) and kRMSNormBackwardWeight ((g, x, rstd) -> g_w): no attributes (NoArgs in the table);
// their operand layout (`weight` is past the inputs for the weight part).
struct NormBackwardLayout {
  int64_t rows = 0, dim = 0;
  size_t weight = 3;  // the input index of w
};
NormBackwardLayout decode_norm_backward(const OpCall& op);

// kCompiledRMSNormBackward: (g_y, x, rstd, w [, a] [, g_h]) -> (g_x, g_w).
//   iargs {has_a, has_g_h}
struct CompiledNormBackwardArgs {
  bool has_a = false, has_g_h = false;
  int64_t rows = 0, dim = 0;
  size_t a = 4, g_h = 4;  // input indices of a and g_h, when present

  void encode(OpCall& op) const { op.iargs = {has_a ? 1 : 0, has_g_h ? 1 : 0}; }
  static CompiledNormBackwardArgs decode(const OpCall& op);
};

}  // namespace fullshard
