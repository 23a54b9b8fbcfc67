// Tensor parallelism's kernels (tensor_parallel.h): the block transpose around the tp
// collectives, the row kernels of the vocab-parallel cross-entropy and the narrow copy of the
// gathered logits' backward. fp32 math per element as the CPU kernels, sums in double, each
// output rounded once; reductions in a fixed order (deterministic). No scratch memory.
#include <algorithm>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"
#include "backends/cuda/kernels/tensor_parallel.h"

namespace fullshard::cuda {
namespace {

using namespace dev;

// ---- block transpose (NOTE [Block transpose in units]): the input read in order, one unit per
// thread and step.
template <int kUnit>
struct Unit;
template <>
struct Unit<16> {
  using T = uint4;
};
template <>
struct Unit<8> {
  using T = uint2;
};
template <>
struct Unit<4> {
  using T = uint32_t;
};
template <>
struct Unit<2> {
  using T = uint16_t;
};
template <>
struct Unit<1> {
  using T = uint8_t;
};

template <int kUnit>
__global__ void block_transpose_kernel(BlockTranspose t, const void* src, void* dst) {
  using T = typename Unit<kUnit>::T;
  const T* s = static_cast<const T*>(src);
  T* d = static_cast<T*>(dst);
  const int64_t n = block_transpose_numel(t);
  for (int64_t e = global_thread(); e < n; e += grid_threads()) d[block_transpose_dst(t, e)] = s[e];
}

// ---- rows: one block per row (grid-stride over rows), as log_softmax in rows.cu.
__global__ void __launch_bounds__(1024)
    row_max_kernel(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) m = fmaxf(m, load_f(x, dx, base + j));
    m = block_max(m, scratch);
    if (threadIdx.x == 0) store_f(y, dy, r, m);
  }
}

__global__ void __launch_bounds__(1024) sum_last_dim_kernel(const void* x, int dx, void* y, int dy,
                                                            int64_t rows, int64_t D, double scale) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) acc += load_f(x, dx, base + j);
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) store_f(y, dy, r, static_cast<float>(acc * scale));
  }
}

// Each element is read and written by one thread: y may alias a.
__global__ void __launch_bounds__(1024) sub_row_kernel(const void* a, int da, const void* b, int db,
                                                       void* y, int dy, int64_t rows, int64_t D) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    const float s = load_f(b, db, r);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
      store_f(y, dy, base + j, __fsub_rn(load_f(a, da, base + j), s));
  }
}

// expf / logf (no fast-math intrinsics): at most 2 / 1 ulp from the exact result (CUDA's stated
// maximum errors; glibc's are within 1 ulp), so a few fp32 ulp from the CPU (docs/cuda-kernels.md).
__global__ void tp_unary_kernel(launch::TpUnary f, const void* x, int dx, void* y, int dy,
                                int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = load_f(x, dx, i);
    store_f(y, dy, i, f == launch::TpUnary::kExp ? expf(v) : logf(v));
  }
}

__global__ void nll_vocab_parallel_kernel(const void* lp, int dlp, const int64_t* targets, void* y,
                                          int dy, int64_t rows, int64_t D, int64_t start) {
  for (int64_t r = global_thread(); r < rows; r += grid_threads()) {
    const int64_t col = targets[r] - start;
    store_f(y, dy, r, col >= 0 && col < D ? -load_f(lp, dlp, r * D + col) : 0.0f);
  }
}

// The scale is g * f in fp32 as loss_parallel.cc; exp(lp) - 1 on the target's column (a column
// outside [0, D) is no column of this shard).
__global__ void __launch_bounds__(1024)
    nll_vocab_parallel_backward_kernel(const void* g, int dg, float f, const void* lp, int dlp,
                                       const int64_t* targets, void* y, int dy, int64_t rows,
                                       int64_t D, int64_t start) {
  const float scale = __fmul_rn(load_f(g, dg, 0), f);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D, col = targets[r] - start;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const float e = expf(load_f(lp, dlp, base + j));
      store_f(y, dy, base + j, __fmul_rn(scale, __fsub_rn(e, j == col ? 1.0f : 0.0f)));
    }
  }
}

// NOTE [Strided 2-D copy] with a factor; elements outside the n columns of each block are not
// written.
__global__ void narrow_copy_kernel(Copy2D c, const void* src, int dsrc, void* dst, int ddst,
                                   float f) {
  const int64_t n = copy2d_numel(c);
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    int64_t si, di;
    copy2d_index(c, e, si, di);
    store_f(dst, ddst, di, __fmul_rn(load_f(src, dsrc, si), f));
  }
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), plan::kMaxGrid));
}

}  // namespace

namespace launch {

void block_transpose(const BlockTranspose& t, const void* src, void* dst, cudaStream_t s) {
  const int64_t n = block_transpose_numel(t);
  if (n == 0) return;
  const plan::Launch l = plan::launch_1d(n);
  switch (t.unit) {
    case 16: block_transpose_kernel<16><<<l.grid, l.block, 0, s>>>(t, src, dst); break;
    case 8: block_transpose_kernel<8><<<l.grid, l.block, 0, s>>>(t, src, dst); break;
    case 4: block_transpose_kernel<4><<<l.grid, l.block, 0, s>>>(t, src, dst); break;
    case 2: block_transpose_kernel<2><<<l.grid, l.block, 0, s>>>(t, src, dst); break;
    default: block_transpose_kernel<1><<<l.grid, l.block, 0, s>>>(t, src, dst); break;
  }
  check_launch("block_transpose");
}

void row_max(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D, cudaStream_t s) {
  if (rows == 0) return;
  row_max_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(x, dx, y, dy, rows, D);
  check_launch("row_max");
}

void sum_last_dim(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D, double scale,
                  cudaStream_t s) {
  if (rows == 0) return;
  sum_last_dim_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(x, dx, y, dy, rows, D, scale);
  check_launch("sum_last_dim");
}

void sub_row(const void* a, int da, const void* b, int db, void* y, int dy, int64_t rows, int64_t D,
             cudaStream_t s) {
  if (rows == 0) return;
  sub_row_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(a, da, b, db, y, dy, rows, D);
  check_launch("sub_row");
}

void tp_unary(TpUnary f, const void* x, int dx, void* y, int dy, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const plan::Launch l = plan::launch_1d(n);
  tp_unary_kernel<<<l.grid, l.block, 0, s>>>(f, x, dx, y, dy, n);
  check_launch(f == TpUnary::kExp ? "exp" : "log");
}

void nll_vocab_parallel(const void* lp, int dlp, const int64_t* targets, void* y, int dy,
                        int64_t rows, int64_t D, int64_t start, cudaStream_t s) {
  if (rows == 0) return;
  const plan::Launch l = plan::launch_1d(rows);
  nll_vocab_parallel_kernel<<<l.grid, l.block, 0, s>>>(lp, dlp, targets, y, dy, rows, D, start);
  check_launch("nll_vocab_parallel");
}

void nll_vocab_parallel_backward(const void* g, int dg, float f, const void* lp, int dlp,
                                 const int64_t* targets, void* y, int dy, int64_t rows, int64_t D,
                                 int64_t start, cudaStream_t s) {
  if (rows == 0) return;
  nll_vocab_parallel_backward_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(
      g, dg, f, lp, dlp, targets, y, dy, rows, D, start);
  check_launch("nll_vocab_parallel_backward");
}

void narrow_copy(const Copy2D& c, const void* src, int dsrc, void* dst, int ddst, float f,
                 cudaStream_t s) {
  const int64_t n = copy2d_numel(c);
  if (n == 0) return;
  const plan::Launch l = plan::launch_1d(n);
  narrow_copy_kernel<<<l.grid, l.block, 0, s>>>(c, src, dsrc, dst, ddst, f);
  check_launch("narrow_copy");
}

}  // namespace launch
}  // namespace fullshard::cuda
