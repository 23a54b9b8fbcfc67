#pragma once
// The norm kernels shared by norm.cu (RMSNorm / LayerNorm) and compiled.cu (torch.compile's
// fused RMSNorm regions), templated on a row's input: x (RowX) or h = x + a added in fp32 and
// never stored (RowXPlusA, kCompiledAddRMSNorm). The fused kernels are the eager ones with the
// add folded into the load: statistics in double as the CPU kernels (norm.cc, compiled.cc),
// per-element math in fp32 with uncontracted operations (__f*_rn) in the CPU's order, so outputs
// match its bits whenever the double statistics round to the same fp32 value.
//
// Everything here has internal linkage (an anonymous namespace): without separable compilation
// each .cu registers its own kernels, so each includer instantiates the ones it launches.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda::dev {
namespace {

// The row kernels run plan::row_block(D) threads, up to 1024 (__launch_bounds__ keeps them
// launchable: at most 64 registers a thread).

// A norm's input element i.
// load8: elements [i, i + 8) by 16-byte accesses (i a multiple of 8, the bases aligned16()).
struct RowX {
  const void* x;
  int dx;
  __device__ __forceinline__ float operator()(int64_t i) const { return load_f(x, dx, i); }
  __device__ __forceinline__ void load8(int64_t i, float* v) const { dev::load8(x, dx, i, v); }
  bool aligned16() const { return reinterpret_cast<uintptr_t>(x) % 16 == 0; }
};
struct RowXPlusA {
  const void* x;
  int dx;
  const void* a;
  int da;
  __device__ __forceinline__ float operator()(int64_t i) const {
    return __fadd_rn(load_f(x, dx, i), load_f(a, da, i));
  }
  __device__ __forceinline__ void load8(int64_t i, float* v) const {
    float b[8];
    dev::load8(x, dx, i, v);
    dev::load8(a, da, i, b);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fadd_rn(v[k], b[k]);
  }
  bool aligned16() const {
    return (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(a)) % 16 == 0;
  }
};

template <class In>
__global__ void __launch_bounds__(1024)
    rms_norm_kernel(In in, const void* w, int dw, void* y, int dy, float* rstd, int64_t rows,
                    int64_t D, double eps) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    double ss = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float v = in(base + d);
      ss += static_cast<double>(v) * v;
    }
    ss = block_sum(ss, scratch);
    const float rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + eps));
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
      store_f(y, dy, base + d, __fmul_rn(__fmul_rn(in(base + d), rs), load_f(w, dw, d)));
  }
}

// NOTE [Norm rows in registers]: with D % 8 == 0 and every base 16-byte aligned
// (plan::norm_vec decides the shape), a block of plan::norm_vec(D).block threads holds a row in
// registers: thread t owns the 8-element vectors t, t + block, ... (kGroups of them), reads them
// once with 16-byte accesses, and everything after the row's sums (the forward's y, the
// backward's gx) comes from those registers: one read and one write of the row where the
// scalar kernels read it twice with 2- or 4-byte accesses. The sums are in double in a fixed
// order (deterministic) and the per-element math is the scalar kernels', operation for
// operation, so only the order of the double sums differs from them. Other shapes run the
// scalar kernels above (the tests' odd sizes and misaligned bases).
template <class In, int kGroups>
__global__ void __launch_bounds__(1024)
    rms_norm_vec_kernel(In in, const void* w, int dw, void* y, int dy, float* rstd, int64_t rows,
                        int64_t D, double eps) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    float v[kGroups][8];
    double ss = 0;
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D) {
        in.load8(base + j, v[k]);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss += static_cast<double>(v[k][e]) * v[k][e];
      }
    }
    ss = block_sum(ss, scratch);
    const float rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + eps));
    if (threadIdx.x == 0) rstd[r] = rs;
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D) {
        float wv[8];
        load8(w, dw, j, wv);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[k][e] = __fmul_rn(__fmul_rn(v[k][e], rs), wv[e]);
        store8(y, dy, base + j, v[k]);
      }
    }
  }
}

// x-hat as the CPU computes it: (x - mean) * rstd for LayerNorm, x * rstd for RMSNorm.
__device__ __forceinline__ float xhat(float x, const float* mean, int64_t r, float rs) {
  return mean ? __fmul_rn(__fsub_rn(x, mean[r]), rs) : __fmul_rn(x, rs);
}

// gx = the norm's input gradient, plus gh (a gradient flowing past the norm, added in fp32
// before the one rounding: kCompiledRMSNormBackward's residual gradient) when gh is not null.
// Each element is read and written by one thread after the row's sums: gx may alias g, gh or x.
template <class In>
__global__ void __launch_bounds__(1024)
    norm_backward_rows_kernel(const void* g, int dg, In x, const float* mean, const float* rstd,
                              const void* w, int dw, const void* gh, int dgh, void* gx, int dgx,
                              int64_t rows, int64_t D) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    const float rs = rstd[r];
    double sum_wg = 0, dot = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float wg = __fmul_rn(load_f(w, dw, d), load_f(g, dg, base + d));
      sum_wg += wg;
      dot += static_cast<double>(wg) * xhat(x(base + d), mean, r, rs);
    }
    dot = block_sum(dot, scratch);
    const float c = static_cast<float>(dot / static_cast<double>(D));
    float a = 0.0f;
    if (mean) a = static_cast<float>(block_sum(sum_wg, scratch) / static_cast<double>(D));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float wg = __fmul_rn(load_f(w, dw, d), load_f(g, dg, base + d));
      const float xh = xhat(x(base + d), mean, r, rs);
      const float t = mean ? __fsub_rn(wg, a) : wg;
      float v = __fmul_rn(rs, __fsub_rn(t, __fmul_rn(xh, c)));
      if (gh) v = __fadd_rn(v, load_f(gh, dgh, base + d));
      store_f(gx, dgx, base + d, v);
    }
  }
}

// The backward rows of NOTE [Norm rows in registers]: w * g and x-hat of the thread's vectors
// stay in registers between the row's sums and gx's store (gx may alias g, gh or x: each
// element is read and written by one thread).
template <class In, int kGroups>
__global__ void __launch_bounds__(1024)
    norm_backward_rows_vec_kernel(const void* g, int dg, In x, const float* mean, const float* rstd,
                                  const void* w, int dw, const void* gh, int dgh, void* gx, int dgx,
                                  int64_t rows, int64_t D) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    const float rs = rstd[r];
    float wg[kGroups][8], xh[kGroups][8];
    double sum_wg = 0, dot = 0;
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D) {
        float wv[8];
        load8(w, dw, j, wv);
        load8(g, dg, base + j, wg[k]);
        x.load8(base + j, xh[k]);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          wg[k][e] = __fmul_rn(wv[e], wg[k][e]);
          xh[k][e] = xhat(xh[k][e], mean, r, rs);
          sum_wg += wg[k][e];
          dot += static_cast<double>(wg[k][e]) * xh[k][e];
        }
      }
    }
    dot = block_sum(dot, scratch);
    const float c = static_cast<float>(dot / static_cast<double>(D));
    float a = 0.0f;
    if (mean) a = static_cast<float>(block_sum(sum_wg, scratch) / static_cast<double>(D));
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      const int64_t j = (static_cast<int64_t>(k) * blockDim.x + threadIdx.x) * 8;
      if (j < D) {
        float hv[8];
        if (gh) load8(gh, dgh, base + j, hv);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float t = mean ? __fsub_rn(wg[k][e], a) : wg[k][e];
          float v = __fmul_rn(rs, __fsub_rn(t, __fmul_rn(xh[k][e], c)));
          if (gh) v = __fadd_rn(v, hv[e]);
          wg[k][e] = v;
        }
        store8(gx, dgx, base + j, wg[k]);
      }
    }
  }
}

// NOTE [Column sums without scratch]: weight / bias gradients sum over every row. Block (bx, gy)
// sums columns [32 bx, 32 bx + 32) over the rows of chunk gy in double: threadIdx.y strides the
// rows, then the 8 (or 32) partial sums are added in a fixed order. With one chunk the block
// writes the result; with several, chunk sums go to `part` [G][D] doubles (memory the op owns:
// the gradient output it writes afterwards) and column_finish adds them in chunk order.
// Deterministic either way.
constexpr int kColX = 32, kColY = 8;

template <bool kNorm, class In>
__global__ void column_partial_kernel(const void* g, int dg, In x, const float* mean,
                                      const float* rstd, int64_t rows, int64_t D,
                                      int64_t chunk_rows, double* part_w, double* part_b,
                                      void* out_w, int dout_w, void* out_b, int dout_b) {
  __shared__ double sw[kColY][kColX], sb[kColY][kColX];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = min(rows, r0 + chunk_rows);
  double aw = 0, ab = 0;
  if (col < D) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      const float gv = load_f(g, dg, r * D + col);
      if (kNorm) aw += static_cast<double>(gv) * xhat(x(r * D + col), mean, r, rstd[r]);
      ab += gv;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || col >= D) return;
  aw = 0;
  ab = 0;
  for (int k = 0; k < kColY; ++k) {
    aw += sw[k][threadIdx.x];
    ab += sb[k][threadIdx.x];
  }
  if (part_w) {  // several chunks: write partials
    const int64_t o = static_cast<int64_t>(blockIdx.y) * D + col;
    if (kNorm) part_w[o] = aw;
    if (part_b) part_b[o] = ab;
    return;
  }
  if (kNorm) store_f(out_w, dout_w, col, static_cast<float>(aw));
  if (out_b) store_f(out_b, dout_b, col, static_cast<float>(ab));
}

// The same sums by 8-column vectors (D % 8 == 0, g and x 16-byte aligned): thread (tx, ty) of
// block bx owns columns [8 (32 bx + tx), + 8) and the rows of the scalar kernel's thread (., ty),
// added in the same order, so the result is the scalar kernel's, bit for bit.
template <bool kNorm, bool kBias, class In>
__global__ void column_partial_vec_kernel(const void* g, int dg, In x, const float* mean,
                                          const float* rstd, int64_t rows, int64_t D,
                                          int64_t chunk_rows, double* part_w, double* part_b,
                                          void* out_w, int dout_w, void* out_b, int dout_b) {
  __shared__ double sw[kColY][kColX * 8], sb[kColY][kColX * 8];
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x) * 8;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = min(rows, r0 + chunk_rows);
  double aw[8], ab[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) aw[e] = ab[e] = 0;
  if (col < D) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      float gv[8], xv[8];
      load8(g, dg, r * D + col, gv);
      if (kNorm) {
        x.load8(r * D + col, xv);
        const float rs = rstd[r];
#pragma unroll
        for (int e = 0; e < 8; ++e) aw[e] += static_cast<double>(gv[e]) * xhat(xv[e], mean, r, rs);
      }
      if (kBias)
#pragma unroll
        for (int e = 0; e < 8; ++e) ab[e] += gv[e];
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    sw[threadIdx.y][threadIdx.x * 8 + e] = aw[e];
    sb[threadIdx.y][threadIdx.x * 8 + e] = ab[e];
  }
  __syncthreads();
  // Thread (tx, ty) finishes column col + ty of its vector: 8 columns a vector, 8 rows of threads.
  const int e = threadIdx.y;
  if (col + e >= D) return;
  double tw = 0, tb = 0;
  for (int k = 0; k < kColY; ++k) {
    tw += sw[k][threadIdx.x * 8 + e];
    tb += sb[k][threadIdx.x * 8 + e];
  }
  if (part_w) {
    const int64_t o = static_cast<int64_t>(blockIdx.y) * D + col + e;
    if (kNorm) part_w[o] = tw;
    if (part_b) part_b[o] = tb;
    return;
  }
  if (kNorm) store_f(out_w, dout_w, col + e, static_cast<float>(tw));
  if (out_b) store_f(out_b, dout_b, col + e, static_cast<float>(tb));
}

__global__ void column_finish_kernel(const double* part_w, const double* part_b, int64_t G,
                                     int64_t D, void* out_w, int dout_w, void* out_b, int dout_b) {
  for (int64_t col = global_thread(); col < D; col += grid_threads()) {
    double aw = 0, ab = 0;
    for (int64_t k = 0; k < G; ++k) {
      if (part_w) aw += part_w[k * D + col];
      if (part_b) ab += part_b[k * D + col];
    }
    if (out_w) store_f(out_w, dout_w, col, static_cast<float>(aw));
    if (out_b) store_f(out_b, dout_b, col, static_cast<float>(ab));
  }
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), plan::kMaxGrid));
}

int64_t esize(int dt) { return dt == kF32 ? 4 : 2; }

// True when [a, a + abytes) and [b, b + bbytes) share a byte (a null b shares none).
bool overlaps(const void* a, int64_t abytes, const void* b, int64_t bbytes) {
  if (!b) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + static_cast<uintptr_t>(bbytes) && y < x + static_cast<uintptr_t>(abytes);
}

bool aligned16_or_null(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <class In>
void rms_norm_launch(In in, const void* w, int dw, void* y, int dy, float* rstd, int64_t rows,
                     int64_t D, double eps, cudaStream_t s, const char* what) {
  if (rows == 0) return;
  const plan::NormVec v = plan::norm_vec(D, 2);  // x + a at 4 groups would spill
  if (v.groups > 0 && in.aligned16() && aligned16_or_null(w) &&
      aligned16_or_null(y)) {  // NOTE [Norm rows in registers]
    if (v.groups == 1)
      rms_norm_vec_kernel<In, 1>
          <<<row_grid(rows), v.block, 0, s>>>(in, w, dw, y, dy, rstd, rows, D, eps);
    else
      rms_norm_vec_kernel<In, 2>
          <<<row_grid(rows), v.block, 0, s>>>(in, w, dw, y, dy, rstd, rows, D, eps);
  } else {
    rms_norm_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(in, w, dw, y, dy, rstd, rows, D,
                                                                  eps);
  }
  launch::check_launch(what);
}

// Weight / bias gradients first, with gx's storage as the chunk partials' scratch when it is
// large enough, 8-byte aligned and overlaps no input (`gx_overlaps_input`, the caller's
// check: NOTE [Column sums without scratch]); then gx (+ gh).
template <class In>
void norm_backward_launch(const void* g, int dg, In x, const float* mean, const float* rstd,
                          const void* w, int dw, const void* gh, int dgh, void* gx, int dgx,
                          void* gw, int dgw, void* gb, int dgb, int64_t rows, int64_t D,
                          bool gx_overlaps_input, cudaStream_t s) {
  const int64_t gx_bytes = rows * D * esize(dgx);
  const int64_t per_chunk = D * 8 * (gb ? 2 : 1);
  int64_t G = std::min<int64_t>((rows + 63) / 64, 1024);
  G = std::min<int64_t>(G, gx_bytes / std::max<int64_t>(per_chunk, 1));
  // No gx (the weight gradient alone): no scratch, one chunk.
  if (gx == nullptr || gx_overlaps_input || reinterpret_cast<uintptr_t>(gx) % 8 != 0) G = 1;
  G = std::max<int64_t>(G, 1);
  const int64_t chunk_rows = (rows + G - 1) / G;
  G = rows == 0 ? 1 : (rows + chunk_rows - 1) / chunk_rows;
  double* part_w = G > 1 ? static_cast<double*>(gx) : nullptr;
  double* part_b = G > 1 && gb ? part_w + G * D : nullptr;
  const dim3 block(kColX, kColY);
  if (gw != nullptr || gb != nullptr) {  // not the input gradient alone (split backward)
    if (D % 8 == 0 && aligned16_or_null(g) && x.aligned16()) {
      const dim3 grid(static_cast<unsigned>((D / 8 + kColX - 1) / kColX), static_cast<unsigned>(G));
      if (gb)
        column_partial_vec_kernel<true, true><<<grid, block, 0, s>>>(
            g, dg, x, mean, rstd, rows, D, chunk_rows, part_w, part_b, gw, dgw, gb, dgb);
      else
        column_partial_vec_kernel<true, false><<<grid, block, 0, s>>>(
            g, dg, x, mean, rstd, rows, D, chunk_rows, part_w, nullptr, gw, dgw, nullptr, 0);
    } else {
      const dim3 grid(static_cast<unsigned>((D + kColX - 1) / kColX), static_cast<unsigned>(G));
      column_partial_kernel<true><<<grid, block, 0, s>>>(g, dg, x, mean, rstd, rows, D, chunk_rows,
                                                         part_w, part_b, gw, dgw, gb, dgb);
    }
    launch::check_launch("norm_backward weight partials");
    if (G > 1) {
      const plan::Launch l = plan::launch_1d(D);
      column_finish_kernel<<<l.grid, l.block, 0, s>>>(part_w, part_b, G, D, gw, dgw, gb, dgb);
      launch::check_launch("norm_backward weight sums");
    }
  }
  if (rows == 0 || gx == nullptr) return;  // gx null: the weight gradient alone
  const plan::NormVec v =
      plan::norm_vec(D, 2);  // two groups: 32 fp32 values a thread stay in registers
  if (v.groups > 0 && aligned16_or_null(g) && x.aligned16() && aligned16_or_null(w) &&
      aligned16_or_null(gh) && aligned16_or_null(gx)) {
    if (v.groups == 1)
      norm_backward_rows_vec_kernel<In, 1><<<row_grid(rows), v.block, 0, s>>>(
          g, dg, x, mean, rstd, w, dw, gh, dgh, gx, dgx, rows, D);
    else
      norm_backward_rows_vec_kernel<In, 2><<<row_grid(rows), v.block, 0, s>>>(
          g, dg, x, mean, rstd, w, dw, gh, dgh, gx, dgx, rows, D);
  } else {
    norm_backward_rows_kernel<<<row_grid(rows), plan::row_block(D), 0, s>>>(
        g, dg, x, mean, rstd, w, dw, gh, dgh, gx, dgx, rows, D);
  }
  launch::check_launch("norm_backward rows");
}

}  // namespace
}  // namespace fullshard::cuda::dev
