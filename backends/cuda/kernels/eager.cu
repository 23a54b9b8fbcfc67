// The kernels of the eager decompositions (model.implementation; docs/ops.md "Implementation
// variants"): pow / add / rsqrt by a scalar, the broadcasting multiply, the last-dim sum, mean's
// backward, complex RoPE, HF's cos / sin tables, repeat_kv and its backward, narrow copies and
// rotate_half's cat. The math of backends/cpu/kernels/eager.cc and rope.cc: fp32 per element with
// uncontracted operations (__f*_rn) in the CPU's order, sums in double where the CPU sums in
// double and in fp32 (same order) where it does, each output rounded once; copies between equal
// dtypes are bit copies. Memory-bound: 16-byte accesses where every base and row allows
// (eight elements, as elementwise.cu). kSumLeadingDims is launch::column_sum (norm.cu).
#include <algorithm>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/eager_launchers.h"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace dev;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ---- pointwise with a scalar (eager.cc map1). Exponents 1, 2, 3 multiply exactly as the CPU
// does; any other is pow in double rounded to fp32 (glibc's powf is within an ulp of that).
template <launch::Scalar kOp>
__device__ __forceinline__ float scalar_apply(float v, float f) {
  if constexpr (kOp == launch::Scalar::kPow1) return v;
  if constexpr (kOp == launch::Scalar::kPow2) return __fmul_rn(v, v);
  if constexpr (kOp == launch::Scalar::kPow3) return __fmul_rn(__fmul_rn(v, v), v);
  if constexpr (kOp == launch::Scalar::kPow)
    return static_cast<float>(pow(static_cast<double>(v), static_cast<double>(f)));
  if constexpr (kOp == launch::Scalar::kAdd) return __fadd_rn(v, f);
  if constexpr (kOp == launch::Scalar::kRsqrt) return __fdiv_rn(1.0f, __fsqrt_rn(v));
  return 0.0f;
}

// `vec`: 8 when n and both bases allow 8-element vectors, else 1.
template <launch::Scalar kOp>
__global__ void scalar_kernel(const void* a, int da, void* o, int dout, int64_t n, float f,
                              int vec) {
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads()) {
      float x[8];
      load8(a, da, t * 8, x);
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = scalar_apply<kOp>(x[k], f);
      store8(o, dout, t * 8, x);
    }
  } else {
    for (int64_t i = global_thread(); i < n; i += grid_threads())
      store_f(o, dout, i, scalar_apply<kOp>(load_f(a, da, i), f));
  }
}

// ---- a [rows, D] * b broadcast (eager.cc mul_broadcast). Vectors (vec == 8) need D % 8 == 0
// (and hd % 8 == 0 per head), so the 8 elements share a row and b's 8 factors are contiguous;
// b_vec: b's base is aligned too (per column / per head).
__global__ void mul_broadcast_kernel(Bcast mode, const void* a, int da, const void* b, int db,
                                     void* o, int dout, int64_t rows, int64_t D, int64_t hd,
                                     int vec, bool b_vec) {
  const int64_t n = rows * D;
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads()) {
      const int64_t e = t * 8, r = e / D, d = e - r * D;
      float x[8], y[8];
      load8(a, da, e, x);
      const int64_t bi = bcast_index(mode, r, d, hd);
      if (mode == Bcast::kRow) {
        const float s = load_f(b, db, bi);
#pragma unroll
        for (int k = 0; k < 8; ++k) y[k] = s;
      } else if (b_vec) {
        load8(b, db, bi, y);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) y[k] = load_f(b, db, bi + k);
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(x[k], y[k]);
      store8(o, dout, e, x);
    }
  } else {
    for (int64_t i = global_thread(); i < n; i += grid_threads()) {
      const int64_t r = i / D, d = i - r * D;
      store_f(o, dout, i, __fmul_rn(load_f(a, da, i), load_f(b, db, bcast_index(mode, r, d, hd))));
    }
  }
}

// ---- y[r, d] = x[r] * scale (eager.cc expand_last_dim: mean's backward). vec: D % 8 == 0 and
// y aligned, so the 8 elements share a row.
__global__ void expand_last_dim_kernel(const void* x, int dx, void* y, int dy, int64_t rows,
                                       int64_t D, float scale, int vec) {
  const int64_t n = rows * D;
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads()) {
      const int64_t e = t * 8;
      const float v = __fmul_rn(load_f(x, dx, e / D), scale);
      float w[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = v;
      store8(y, dy, e, w);
    }
  } else {
    for (int64_t i = global_thread(); i < n; i += grid_threads())
      store_f(y, dy, i, __fmul_rn(load_f(x, dx, i / D), scale));
  }
}

// ---- RoPE angles: angle = fp32(pos) * inv_freq in fp32 (NOTE [RoPE in fp32]), inv_freq the
// host's (rope_inv_freq), cos / sin of that fp32 angle evaluated in double and rounded once: the
// correctly rounded value except at near-ties, where glibc's cosf / sinf may differ by an ulp.
__device__ __forceinline__ void rope_cos_sin(int64_t pos, float inv, float& c, float& s) {
  const float a = __fmul_rn(static_cast<float>(pos), inv);
  double sd, cd;
  sincos(static_cast<double>(a), &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}

__global__ void rotary_cos_sin_kernel(void* cos_t, int dcos, void* sin_t, int dsin, int64_t rows,
                                      int64_t S, int64_t hd,
                                      const __grid_constant__ launch::RopeFreqs f) {
  const int64_t half = hd / 2;
  for (int64_t t = global_thread(); t < rows * half; t += grid_threads()) {
    const int64_t row = t / half, j = t - row * half, base = row * hd;
    float c, s;
    rope_cos_sin(row % S, f.inv[j], c, s);
    store_f(cos_t, dcos, base + j, c);
    store_f(cos_t, dcos, base + j + half, c);
    store_f(sin_t, dsin, base + j, s);
    store_f(sin_t, dsin, base + j + half, s);
  }
}

// ---- copies: one element, or 8 from 16-byte aligned element offsets; a bit copy when the
// dtypes match (the CPU's convert is a memmove then), else through fp32.
__device__ __forceinline__ void move1(const void* src, int sdt, int64_t si, void* dst, int ddt,
                                      int64_t di) {
  if (sdt != ddt) return store_f(dst, ddt, di, load_f(src, sdt, si));
  if (sdt == kF32) {
    static_cast<uint32_t*>(dst)[di] = static_cast<const uint32_t*>(src)[si];
  } else {
    static_cast<uint16_t*>(dst)[di] = static_cast<const uint16_t*>(src)[si];
  }
}
__device__ __forceinline__ void move8(const void* src, int sdt, int64_t si, void* dst, int ddt,
                                      int64_t di) {
  if (sdt != ddt) {
    float v[8];
    load8(src, sdt, si, v);
    return store8(dst, ddt, di, v);
  }
  if (sdt == kF32) {
    const uint4* s = reinterpret_cast<const uint4*>(static_cast<const uint32_t*>(src) + si);
    uint4* d = reinterpret_cast<uint4*>(static_cast<uint32_t*>(dst) + di);
    d[0] = s[0];
    d[1] = s[1];
  } else {
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + di) =
        *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src) + si);
  }
}

// kRepeatKV: a thread per element (or 8, with hd % 8 == 0 so they share a head) of y.
__global__ void repeat_kv_kernel(const void* x, int dx, void* y, int dy, int64_t n, int64_t rep,
                                 int64_t hd, int vec) {
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads())
      move8(x, dx, repeat_kv_source(t * 8, rep, hd), y, dy, t * 8);
  } else {
    for (int64_t e = global_thread(); e < n; e += grid_threads())
      move1(x, dx, repeat_kv_source(e, rep, hd), y, dy, e);
  }
}

// kRepeatKVBackward: a thread per element (or 8) of gx sums its rep copies in fp32 from 0, in
// copy order, as repeat_kv_backward does.
__global__ void repeat_kv_backward_kernel(const void* g, int dg, void* gx, int dgx, int64_t n,
                                          int64_t rep, int64_t hd, int vec) {
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads()) {
      float acc[8], part[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
      for (int64_t j = 0; j < rep; ++j) {
        load8(g, dg, repeat_kv_copy(t * 8, j, rep, hd), part);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] = __fadd_rn(acc[k], part[k]);
      }
      store8(gx, dgx, t * 8, acc);
    }
  } else {
    for (int64_t e = global_thread(); e < n; e += grid_threads()) {
      float acc = 0.0f;
      for (int64_t j = 0; j < rep; ++j)
        acc = __fadd_rn(acc, load_f(g, dg, repeat_kv_copy(e, j, rep, hd)));
      store_f(gx, dgx, e, acc);
    }
  }
}

// kRotateHalfCat: a thread per element of y (or 8, with hd / 2 % 8 == 0 so they share a half).
__global__ void rotate_half_cat_kernel(const void* neg, int dn, const void* x, int dx, void* y,
                                       int dy, int64_t n, int64_t hd, int vec) {
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads()) {
      int64_t si;
      if (rotate_half_source(t * 8, hd, si)) {
        move8(neg, dn, si, y, dy, t * 8);
      } else {
        move8(x, dx, si, y, dy, t * 8);
      }
    }
  } else {
    for (int64_t e = global_thread(); e < n; e += grid_threads()) {
      int64_t si;
      if (rotate_half_source(e, hd, si)) {
        move1(neg, dn, si, y, dy, e);
      } else {
        move1(x, dx, si, y, dy, e);
      }
    }
  }
}

template <launch::Scalar kOp>
void launch_scalar(const void* a, int da, void* o, int dout, int64_t n, float f, cudaStream_t s) {
  const int vec = n % 8 == 0 && aligned16(a) && aligned16(o) ? 8 : 1;
  const plan::Launch l = plan::launch_1d(n / vec);
  scalar_kernel<kOp><<<l.grid, l.block, 0, s>>>(a, da, o, dout, n, f, vec);
}

}  // namespace

namespace launch {

void scalar_op(Scalar op, const void* a, int da, void* o, int dout, int64_t n, float f,
               cudaStream_t s) {
  if (n == 0) return;
  switch (op) {
    case Scalar::kPow1: launch_scalar<Scalar::kPow1>(a, da, o, dout, n, f, s); break;
    case Scalar::kPow2: launch_scalar<Scalar::kPow2>(a, da, o, dout, n, f, s); break;
    case Scalar::kPow3: launch_scalar<Scalar::kPow3>(a, da, o, dout, n, f, s); break;
    case Scalar::kPow: launch_scalar<Scalar::kPow>(a, da, o, dout, n, f, s); break;
    case Scalar::kAdd: launch_scalar<Scalar::kAdd>(a, da, o, dout, n, f, s); break;
    case Scalar::kRsqrt: launch_scalar<Scalar::kRsqrt>(a, da, o, dout, n, f, s); break;
  }
  check_launch("scalar_op");
}

void mul_broadcast(Bcast mode, const void* a, int da, const void* b, int db, void* o, int dout,
                   int64_t rows, int64_t D, int64_t hd, cudaStream_t s) {
  if (rows * D == 0) return;
  const bool shape8 = D % 8 == 0 && (mode != Bcast::kHead || hd % 8 == 0);
  const int vec = shape8 && aligned16(a) && aligned16(o) ? 8 : 1;
  const plan::Launch l = plan::launch_1d(rows * D / vec);
  mul_broadcast_kernel<<<l.grid, l.block, 0, s>>>(mode, a, da, b, db, o, dout, rows, D, hd, vec,
                                                  aligned16(b));
  check_launch("mul_broadcast");
}

void expand_last_dim(const void* x, int dx, void* y, int dy, int64_t rows, int64_t D, float scale,
                     cudaStream_t s) {
  if (rows * D == 0) return;
  const int vec = D % 8 == 0 && aligned16(y) ? 8 : 1;
  const plan::Launch l = plan::launch_1d(rows * D / vec);
  expand_last_dim_kernel<<<l.grid, l.block, 0, s>>>(x, dx, y, dy, rows, D, scale, vec);
  check_launch("expand_last_dim");
}

void rotary_cos_sin(void* cos_t, int dcos, void* sin_t, int dsin, int64_t rows, int64_t S,
                    int64_t hd, const RopeFreqs& f, cudaStream_t s) {
  if (rows == 0) return;
  const plan::Launch l = plan::launch_1d(rows * (hd / 2));
  rotary_cos_sin_kernel<<<l.grid, l.block, 0, s>>>(cos_t, dcos, sin_t, dsin, rows, S, hd, f);
  check_launch("rotary_cos_sin");
}

void repeat_kv(const void* x, int dx, void* y, int dy, int64_t rows, int64_t kv, int64_t rep,
               int64_t hd, cudaStream_t s) {
  const int64_t n = rows * kv * rep * hd;
  if (n == 0) return;
  const int vec = hd % 8 == 0 && aligned16(x) && aligned16(y) ? 8 : 1;
  const plan::Launch l = plan::launch_1d(n / vec);
  repeat_kv_kernel<<<l.grid, l.block, 0, s>>>(x, dx, y, dy, n, rep, hd, vec);
  check_launch("repeat_kv");
}

void repeat_kv_backward(const void* g, int dg, void* gx, int dgx, int64_t rows, int64_t kv,
                        int64_t rep, int64_t hd, cudaStream_t s) {
  const int64_t n = rows * kv * hd;
  if (n == 0) return;
  const int vec = hd % 8 == 0 && aligned16(g) && aligned16(gx) ? 8 : 1;
  const plan::Launch l = plan::launch_1d(n / vec);
  repeat_kv_backward_kernel<<<l.grid, l.block, 0, s>>>(g, dg, gx, dgx, n, rep, hd, vec);
  check_launch("repeat_kv_backward");
}

void rotate_half_cat(const void* neg, int dn, const void* x, int dx, void* y, int dy,
                     int64_t blocks, int64_t hd, cudaStream_t s) {
  const int64_t n = blocks * hd;
  if (n == 0) return;
  const int vec = (hd / 2) % 8 == 0 && aligned16(neg) && aligned16(x) && aligned16(y) ? 8 : 1;
  const plan::Launch l = plan::launch_1d(n / vec);
  rotate_half_cat_kernel<<<l.grid, l.block, 0, s>>>(neg, dn, x, dx, y, dy, n, hd, vec);
  check_launch("rotate_half_cat");
}

}  // namespace launch
}  // namespace fullshard::cuda
