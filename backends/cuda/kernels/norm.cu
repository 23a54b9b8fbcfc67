// RMSNorm / LayerNorm forward and backward, and column sums (bias / norm-weight gradients).
// One block per row; row statistics in double as the CPU kernels (norm.cc), per-element math
// in fp32 with uncontracted operations (__f*_rn) in the CPU's order, so outputs match its bits
// whenever the double statistics round to the same fp32 value. The RMSNorm and backward kernels
// are in norm_rows.cuh (shared with the compiled block's fused norms, compiled.cu).
#include <algorithm>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/norm_rows.cuh"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

// Row r's statistics from its mean and its partial sums of squared deviations (both LayerNorm
// kernels): fp32 mean and rstd as the CPU rounds them, stored by thread 0.
__device__ __forceinline__ void layer_norm_stats(double ss, double mu, int64_t D, double eps,
                                                 double* scratch, int64_t r, float* mean,
                                                 float* rstd, float& m, float& rs) {
  ss = dev::block_sum(ss, scratch);
  rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + eps));
  m = static_cast<float>(mu);
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

using namespace dev;

__global__ void __launch_bounds__(1024)
    layer_norm_kernel(const void* x, int dx, const void* w, int dw, const void* b, int db, void* y,
                      int dy, float* mean, float* rstd, int64_t rows, int64_t D, double eps) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    double s = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += load_f(x, dx, base + d);
    const double mu = block_sum(s, scratch) / static_cast<double>(D);
    double ss = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const double c = static_cast<double>(load_f(x, dx, base + d)) - mu;
      ss += c * c;
    }
    float m, rs;
    layer_norm_stats(ss, mu, D, eps, scratch, r, mean, rstd, m, rs);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float xh = __fmul_rn(__fsub_rn(load_f(x, dx, base + d), m), rs);
      store_f(y, dy, base + d, __fadd_rn(__fmul_rn(xh, load_f(w, dw, d)), load_f(b, db, d)));
    }
  }
}

// LayerNorm by NOTE [Norm rows in registers]: the row read once into registers, mean and the
// centred sum of squares from them (double, as above), y from them.
template <int kGroups>
__global__ void __launch_bounds__(1024)
    layer_norm_vec_kernel(const void* x, int dx, const void* w, int dw, const void* b, int db,
                          void* y, int dy, float* mean, float* rstd, int64_t rows, int64_t D,
                          double eps) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    float v[kGroups][8];
    double s = 0;
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D) {
        load8(x, dx, base + j, v[k]);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += v[k][e];
      }
    }
    const double mu = block_sum(s, scratch) / static_cast<double>(D);
    double ss = 0;
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D)
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const double c = static_cast<double>(v[k][e]) - mu;
          ss += c * c;
        }
    }
    float m, rs;
    layer_norm_stats(ss, mu, D, eps, scratch, r, mean, rstd, m, rs);
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D) {
        float wv[8], bv[8];
        load8(w, dw, j, wv);
        load8(b, db, j, bv);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[k][e] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[k][e], m), rs), wv[e]), bv[e]);
        store8(y, dy, base + j, v[k]);
      }
    }
  }
}

}  // namespace

namespace launch {

void rms_norm(const void* x, int dx, const void* w, int dw, void* y, int dy, float* rstd,
              int64_t rows, int64_t D, double eps, cudaStream_t s) {
  rms_norm_launch(RowX{x, dx}, w, dw, y, dy, rstd, rows, D, eps, s, "rms_norm");
}

void layer_norm(const void* x, int dx, const void* w, int dw, const void* b, int db, void* y,
                int dy, float* mean, float* rstd, int64_t rows, int64_t D, double eps,
                cudaStream_t s) {
  if (rows == 0) return;
  const plan::NormVec v = plan::norm_vec(D, 2);
  const bool aligned =
      aligned16_or_null(x) && aligned16_or_null(w) && aligned16_or_null(b) && aligned16_or_null(y);
  if (v.groups == 1 && aligned) {
    layer_norm_vec_kernel<1>
        <<<row_grid(rows), v.block, 0, s>>>(x, dx, w, dw, b, db, y, dy, mean, rstd, rows, D, eps);
  } else if (v.groups == 2 && aligned) {
    layer_norm_vec_kernel<2>
        <<<row_grid(rows), v.block, 0, s>>>(x, dx, w, dw, b, db, y, dy, mean, rstd, rows, D, eps);
  } else {
    layer_norm_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(x, dx, w, dw, b, db, y, dy,
                                                                    mean, rstd, rows, D, eps);
  }
  check_launch("layer_norm");
}

void norm_backward(const void* g, int dg, const void* x, int dx, const float* mean,
                   const float* rstd, const void* w, int dw, void* gx, int dgx, void* gw, int dgw,
                   void* gb, int dgb, int64_t rows, int64_t D, cudaStream_t s) {
  const int64_t gx_bytes = rows * D * esize(dgx);
  const bool gx_overlaps_input = overlaps(gx, gx_bytes, g, rows * D * esize(dg)) ||
                                 overlaps(gx, gx_bytes, x, rows * D * esize(dx));
  norm_backward_launch(g, dg, RowX{x, dx}, mean, rstd, w, dw, nullptr, 0, gx, dgx, gw, dgw, gb, dgb,
                       rows, D, gx_overlaps_input, s);
}

void column_sum(const void* g, int dg, void* out, int dout, int64_t M, int64_t N, cudaStream_t s) {
  if (N == 0) return;
  const dim3 block(kColX, kColY), grid(static_cast<unsigned>((N + kColX - 1) / kColX), 1);
  column_partial_kernel<false><<<grid, block, 0, s>>>(
      g, dg, RowX{nullptr, 0}, nullptr, nullptr, M, N, M, nullptr, nullptr, nullptr, 0, out, dout);
  check_launch("column_sum");
}

}  // namespace launch
}  // namespace fullshard::cuda
