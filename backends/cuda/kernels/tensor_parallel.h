#pragma once
// The CUDA side of tensor parallelism (core/model/tensor_parallel.h, loss_parallel.cc): the
// layout copy around the tp collectives (kTransposeBlocks), the row kernels of the
// vocab-parallel cross-entropy (kRowMax, kSubRow, kExp, kLog, kSumLastDim, kNllVocabParallel and
// its backward) and the gathered logits' backward (kNarrowCopy). Contracts: the CPU kernels
// (backends/cpu/kernels/loss_parallel.cc, eager.cc); tolerances in docs/cuda-kernels.md.
// Plain C++: the index map is shared with tensor_parallel.cu (as index_math.h), the plan is
// host-only and tested without a GPU (tests/gpu/cuda_kernels_tp_plan_test.cc).
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/index_math.h"
#include "core/runtime/op.h"

namespace fullshard::cuda {

// NOTE [Block transpose in units]: kTransposeBlocks is a layout copy (no arithmetic, any dtype):
// in viewed as [a][b][row], out[j][i] = in[i][j]. The kernel moves `unit` bytes at a time (16,
// 8, 4, 2 or 1: the largest that divides the row's bytes and both base addresses), reading the
// input in order: source unit e lands at block_transpose_dst(t, e).
struct BlockTranspose {
  int64_t a = 0, b = 0;  // the block grid of the input
  int64_t units = 0;     // units per row
  int unit = 1;          // bytes per unit
};
FS_HD int64_t block_transpose_numel(const BlockTranspose& t) { return t.a * t.b * t.units; }
FS_HD int64_t block_transpose_dst(const BlockTranspose& t, int64_t e) {
  const int64_t row = e / t.units, u = e - row * t.units;  // row = i * b + j of the input
  const int64_t i = row / t.b, j = row - i * t.b;
  return (j * t.a + i) * t.units + u;
}

namespace plan {

// A tensor-parallel kind's operands decoded and checked as its CPU kernel checks them (sizes,
// arities, arguments; every float operand fp32, bf16 or fp16). Throws InternalError naming the op.
struct TpPlan {
  int64_t rows = 0, dim = 0;  // rows of `dim` elements (every kind but kTransposeBlocks)
  int64_t numel = 0;          // kExp, kLog: elements
  int64_t start = 0;          // kNllVocabParallel(Backward): the shard's first vocab index
  double scale = 1.0;         // RowArgs / VocabParallelArgs / NarrowCopyArgs::scale
  Copy2D narrow;              // kNarrowCopy: n columns of each block (NOTE [Strided 2-D copy])
  int64_t a = 0, b = 0, row_bytes = 0;  // kTransposeBlocks
};
TpPlan plan_tensor_parallel(const OpCall& op);
// The unit of NOTE [Block transpose in units] for rows of `row_bytes` bytes between these bases.
BlockTranspose plan_block_transpose(int64_t a, int64_t b, int64_t row_bytes, const void* src,
                                    const void* dst);

}  // namespace plan

// Checks `op` (plan_tensor_parallel), then enqueues its kernel on `s` (dispatch.cc calls it for
// every kind plan_tensor_parallel decodes).
void launch_tensor_parallel(const OpCall& op, const std::vector<void*>& in,
                            const std::vector<void*>& out, cudaStream_t s);

namespace launch {

// tensor_parallel.cu. Device addresses, DCode dtypes; every function only enqueues.
void block_transpose(const BlockTranspose& t, const void* src, void* dst, cudaStream_t s);
// y[r] = max_d x[r, d] (fmaxf: NaN skipped as std::max skips it).
void row_max(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D, cudaStream_t s);
// y[r] = (sum_d x[r, d]) * scale, summed in double.
void sum_last_dim(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D, double scale,
                  cudaStream_t s);
// y[r, d] = a[r, d] - b[r]; y may alias a.
void sub_row(const void* a, int da, const void* b, int db, void* y, int dy, int64_t rows, int64_t D,
             cudaStream_t s);
enum class TpUnary : int { kExp, kLog };
// y = exp(x) / log(x) over n elements; y may alias x.
void tp_unary(TpUnary f, const void* x, int dx, void* y, int dy, int64_t n, cudaStream_t s);
// y[r] = -lp[r, t_r - start] where that column is in [0, D), else 0.
void nll_vocab_parallel(const void* lp, int dlp, const int64_t* targets, void* y, int dy,
                        int64_t rows, int64_t D, int64_t start, cudaStream_t s);
// y[r, d] = (g * f) * (exp(lp[r, d]) - [d == t_r - start]), g read on the device,
// f = VocabParallelArgs::scale.
void nll_vocab_parallel_backward(const void* g, int dg, float f, const void* lp, int dlp,
                                 const int64_t* targets, void* y, int dy, int64_t rows, int64_t D,
                                 int64_t start, cudaStream_t s);
// dst[c.dst_off + r * c.dst_ld + i] = f * src[c.src_off + r * c.src_ld + i] for i < c.cols.
void narrow_copy(const Copy2D& c, const void* src, int dsrc, void* dst, int ddst, float f,
                 cudaStream_t s);

}  // namespace launch
}  // namespace fullshard::cuda
