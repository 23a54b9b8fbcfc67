#pragma once
// The typed arguments of tensor parallelism's layout ops and loss parallel's vocab-parallel NLL
// (core/model/tensor_parallel.h, loss_parallel.cc), decoded and checked once here for the CPU
// reference and the CUDA kernels (NOTE [One op table] in op_table.h). Failures name the op.
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

// kTransposeBlocks: out[j][i][:] = in[i][j][:], both a * b * inner elements of one dtype.
//   iargs {a, b, inner}
struct TransposeBlocksArgs {
  int64_t a = 0, b = 0, inner = 0;

  void encode(OpCall& op) const { op.iargs = {a, b, inner}; }
  static TransposeBlocksArgs decode(const OpCall& op);
};

// kNarrowCopy: per block b, out[b * out_width + out_offset + i] = scale * in[b * in_width +
// in_offset + i] for i < n.  iargs {n, in_width, in_offset, out_width, out_offset}; fargs
// {scale} (absent: 1)
struct NarrowCopyArgs {
  int64_t n = 0, in_width = 0, in_offset = 0, out_width = 0, out_offset = 0;
  double scale = 1;
  int64_t blocks = 0;

  void encode(OpCall& op) const;
  static NarrowCopyArgs decode(const OpCall& op);
};

// kNllVocabParallel ((lp [R, D], int64 targets [R]) -> [R]) and its backward ((g scalar, lp,
// targets) -> [R, D]): this rank's vocab columns start at `start`.  iargs {D, start}; fargs
// {scale} (backward only)
struct VocabParallelArgs {
  int64_t dim = 0, start = 0;
  double scale = 1;
  int64_t rows = 0;

  void encode(OpCall& op) const;
  static VocabParallelArgs decode(const OpCall& op);
};

}  // namespace fullshard
