#pragma once
// Arguments the eager decompositions' ops share (model.implementation; docs/ops.md
// "Implementation variants"), decoded in one place for the CPU reference and the CUDA kernels
// (as adamw_args.h, repeat_kv_args.h). Failures name the op.
#include <cstdint>
#include <string>

#include "core/common/error.h"
#include "core/runtime/op.h"

namespace fullshard {

// fargs[0] (the scalar of kPowScalar, kAddScalar, ...).
inline double eager_farg(const OpCall& op) {
  FULLSHARD_CHECK(!op.fargs.empty(),
                  std::string(op_kind_name(op.kind)) + " '" + op.name + "': needs fargs[0]");
  return op.fargs[0];
}

// iargs[0] = D, the last dim of `full`, which it must divide.
inline int64_t eager_row_width(const OpCall& op, const TensorMeta& full) {
  const std::string where = std::string(op_kind_name(op.kind)) + " '" + op.name + "': ";
  FULLSHARD_CHECK(!op.iargs.empty(), where + "needs iargs[0] = D (the last dim)");
  const int64_t D = op.iargs[0];
  FULLSHARD_CHECK(D > 0 && full.numel() % D == 0,
                  where + "the last dim does not divide the tensor");
  return D;
}

}  // namespace fullshard
