// torch._grouped_mm on the GPU (NOTE [Grouped GEMM on the GPU] in moe_plan.h): tiled fp32 SIMT
// GEMMs that read the group ends on the device (NOTE [Grouped GEMM tiles] in moe_index.h), with
// the CPU kernel's contract (backends/cpu/kernels/moe_grouped_mm.cc): operands converted to fp32,
// products summed in fp32 in k order (a fixed order: the same bits on every run), each output
// rounded once; rows past the last group are zeros, an empty group's weight gradient is zero.
#include <cstdint>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/moe_index.h"
#include "backends/cuda/kernels/moe_launch.h"

namespace fullshard::cuda::launch {

namespace {

using dev::load_f;
using dev::store_f;

constexpr int kTile = 64;     // output rows and columns of a block
constexpr int kDepth = 16;    // the inner dimension staged per step
constexpr int kThreads = 256;  // 16 x 16 threads, 4 x 4 outputs each

// C [rows, cols] over group rows: C[r, j] = sum_i A[r, i] B(i, j), A row-major [rows, inner];
// B(i, j) = w[e][j, i] (trans_b: the forward's w^T) or w[e][i, j] (the input gradient's w).
__global__ void __launch_bounds__(kThreads)
    grouped_rows_kernel(const void* a, int da, const void* w, int dw, const int64_t* offs, void* c,
                        int dc, int64_t rows, int64_t inner, int64_t cols, int64_t E, bool trans_b) {
  __shared__ float as[kDepth][kTile];
  __shared__ float bs[kDepth][kTile];
  __shared__ int64_t tile_group, tile_row0, tile_row1;
  if (threadIdx.x == 0) {
    int64_t g = 0, r0 = 0, r1 = 0;
    if (!moe_grouped_tile(blockIdx.x, offs, E, rows, kTile, g, r0, r1)) g = -1;
    tile_group = g, tile_row0 = r0, tile_row1 = r1;
  }
  __syncthreads();
  if (tile_group < 0) return;
  const int64_t e = tile_group, row0 = tile_row0, row1 = tile_row1;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t wbase = e * inner * cols;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t i0 = 0; i0 < inner; i0 += kDepth) {
    for (int l = threadIdx.x; l < kDepth * kTile; l += kThreads) {
      const int d = l % kDepth, t = l / kDepth;  // a: consecutive threads along the inner dim
      const int64_t r = row0 + t, i = i0 + d;
      as[d][t] = r < row1 && i < inner ? load_f(a, da, r * inner + i) : 0.0f;
      int bd, bt;
      if (trans_b) {
        bd = l % kDepth, bt = l / kDepth;  // w[e][j, i]: along i
      } else {
        bt = l % kTile, bd = l / kTile;  // w[e][i, j]: along j
      }
      const int64_t j = col0 + bt, ii = i0 + bd;
      bs[bd][bt] = j < cols && ii < inner
                       ? load_f(w, dw, wbase + (trans_b ? j * inner + ii : ii * cols + j))
                       : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      float av[4], bv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) av[q] = as[d][ty * 4 + q], bv[q] = bs[d][tx * 4 + q];
#pragma unroll
      for (int p = 0; p < 4; ++p)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[p][q] = fmaf(av[p], bv[q], acc[p][q]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t r = row0 + ty * 4 + p, j = col0 + tx * 4 + q;
      if (r < row1 && j < cols) store_f(c, dc, r * cols + j, acc[p][q]);
    }
}

// Rows past the last group's (clamped) end: zeros.
__global__ void grouped_tail_kernel(const int64_t* offs, void* c, int dc, int64_t rows, int64_t cols,
                                    int64_t E) {
  __shared__ int64_t end;
  if (threadIdx.x == 0) {
    int64_t b = 0;
    for (int64_t e = 0; e < E; ++e) b = moe_group_bound(offs, e, b, rows);
    end = b;
  }
  __syncthreads();
  const int64_t n = (rows - end) * cols;
  for (int64_t i = dev::global_thread(); i < n; i += dev::grid_threads())
    store_f(c, dc, end * cols + i, 0.0f);
}

// g_w[e] [n, k] = g[group e]^T x[group e]: block (k tile, n tile, e), the group's rows in order.
__global__ void __launch_bounds__(kThreads)
    grouped_weight_kernel(const void* g, int dg, const void* x, int dx, const int64_t* offs,
                          void* gw, int dgw, int64_t rows, int64_t k, int64_t n, int64_t E) {
  __shared__ float gs[kDepth][kTile];
  __shared__ float xs[kDepth][kTile];
  __shared__ int64_t group_begin, group_end;
  const int64_t e = blockIdx.z;
  if (threadIdx.x == 0) {
    int64_t b = 0, prev = 0;
    for (int64_t q = 0; q <= e; ++q) prev = b, b = moe_group_bound(offs, q, b, rows);
    group_begin = prev, group_end = b;
  }
  __syncthreads();
  const int64_t begin = group_begin, end = group_end;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kTile, n0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t r0 = begin; r0 < end; r0 += kDepth) {
    for (int l = threadIdx.x; l < kDepth * kTile; l += kThreads) {
      const int t = l % kTile, d = l / kTile;  // along the columns of one row
      const int64_t r = r0 + d;
      gs[d][t] = r < end && n0 + t < n ? load_f(g, dg, r * n + n0 + t) : 0.0f;
      xs[d][t] = r < end && k0 + t < k ? load_f(x, dx, r * k + k0 + t) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      float av[4], bv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) av[q] = gs[d][ty * 4 + q], bv[q] = xs[d][tx * 4 + q];
#pragma unroll
      for (int p = 0; p < 4; ++p)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[p][q] = fmaf(av[p], bv[q], acc[p][q]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t j = n0 + ty * 4 + p, i = k0 + tx * 4 + q;
      if (j < n && i < k) store_f(gw, dgw, (e * n + j) * k + i, acc[p][q]);
    }
}

unsigned tiles(int64_t n) { return static_cast<unsigned>((n + kTile - 1) / kTile); }

}  // namespace

void moe_grouped_mm(GroupedMm which, const void* a, int da, const void* b, int db,
                    const int64_t* offs, void* y, int dy, int64_t rows, int64_t k, int64_t n,
                    int64_t E, cudaStream_t s) {
  if (which == GroupedMm::kBackwardWeight) {
    grouped_weight_kernel<<<dim3(tiles(k), tiles(n), static_cast<unsigned>(E)), kThreads, 0, s>>>(
        a, da, b, db, offs, y, dy, rows, k, n, E);
    check_launch("moe_grouped_mm (weight gradient)");
    return;
  }
  if (rows == 0) return;
  const bool fwd = which == GroupedMm::kForward;
  const int64_t inner = fwd ? k : n, cols = fwd ? n : k;
  const int64_t max_tiles = moe_grouped_max_tiles(rows, E, kTile);
  grouped_rows_kernel<<<dim3(static_cast<unsigned>(max_tiles), tiles(cols)), kThreads, 0, s>>>(
      a, da, b, db, offs, y, dy, rows, inner, cols, E, fwd);
  check_launch(fwd ? "moe_grouped_mm" : "moe_grouped_mm (input gradient)");
  grouped_tail_kernel<<<static_cast<unsigned>(std::min<int64_t>(65535, (rows * cols + 255) / 256)),
                        256, 0, s>>>(offs, y, dy, rows, cols, E);
  check_launch("moe_grouped_mm (rows past the groups)");
}

}  // namespace fullshard::cuda::launch
