// Copies (bit copies and casts over NOTE [Strided 2-D copy]), fill, the pointwise ops, gradient
// clipping's scale and the AdamW step. Memory-bound: 16-byte accesses where layouts allow.
#include <algorithm>
#include <vector>

#include "backends/cuda/kernels/activations.cuh"
#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace dev;

// ---- copies. `vec` elements per access (a power of two dividing every offset, stride, width
// and limit, plan::copy_vector), so a vector never straddles a row or the zero-padding limit.
__global__ void copy2d_bytes_kernel(Copy2D c, const unsigned char* src, unsigned char* dst,
                                    int vec) {
  const int64_t items = copy2d_numel(c) / vec;
  for (int64_t t = global_thread(); t < items; t += grid_threads()) {
    int64_t si, di;
    copy2d_index(c, t * vec, si, di);
    if (vec == 16) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dst + di) =
          si < c.src_limit ? *reinterpret_cast<const uint4*>(src + si) : z;
    } else if (vec == 8) {
      *reinterpret_cast<uint2*>(dst + di) =
          si < c.src_limit ? *reinterpret_cast<const uint2*>(src + si) : make_uint2(0, 0);
    } else {
      for (int k = 0; k < vec; ++k) dst[di + k] = si + k < c.src_limit ? src[si + k] : 0;
    }
  }
}

__global__ void copy2d_cast_kernel(Copy2D c, const void* src, int sdt, void* dst, int ddt,
                                   int vec) {
  const int64_t items = copy2d_numel(c) / vec;
  for (int64_t t = global_thread(); t < items; t += grid_threads()) {
    int64_t si, di;
    copy2d_index(c, t * vec, si, di);
    if (vec == 8) {
      float v[8];
      if (si < c.src_limit) {
        load8(src, sdt, si, v);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = 0.0f;
      }
      store8(dst, ddt, di, v);
    } else {
      for (int k = 0; k < vec; ++k)
        store_f(dst, ddt, di + k, si + k < c.src_limit ? load_f(src, sdt, si + k) : 0.0f);
    }
  }
}

struct Pattern {
  unsigned char b[16];
};
__global__ void fill_kernel(unsigned char* dst, int64_t nbytes, Pattern p) {
  // Thread t writes bytes [16t, 16t + 16); the pattern repeats every element, and 16 is a
  // multiple of every element size, so byte i is p.b[i % 16] from an element-aligned base.
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  const int64_t chunks = (nbytes + 15) / 16;
  for (int64_t t = global_thread(); t < chunks; t += grid_threads()) {
    const int64_t b0 = t * 16;
    if (aligned && b0 + 16 <= nbytes) {
      uint4 v;
      memcpy(&v, p.b, 16);
      *reinterpret_cast<uint4*>(dst + b0) = v;
    } else {
      for (int64_t i = b0; i < nbytes && i < b0 + 16; ++i) dst[i] = p.b[i % 16];
    }
  }
}

// ---- pointwise math, fp32 as the CPU kernels (elementwise.cc). __f*_rn keeps single operations
// uncontracted, so add / mul / scale round exactly as the host does.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;
__device__ __forceinline__ float tanh_via_exp(float u) {
  return 1.0f - 2.0f / (1.0f + expf(2.0f * u));
}

__device__ __forceinline__ float apply(launch::Ew op, float a, float b, float f) {
  switch (op) {
    case launch::Ew::kAdd: return __fadd_rn(a, b);
    case launch::Ew::kMul: return __fmul_rn(a, b);
    case launch::Ew::kScale: return __fmul_rn(a, f);
    case launch::Ew::kSiLU: return silu(a);
    case launch::Ew::kSiLUBackward: return silu_backward(a, b);  // a = grad, b = x
    case launch::Ew::kGELU: {
      const float u = kSqrt2OverPi * (a + kGeluCoef * a * a * a);
      return 0.5f * a * (1.0f + tanh_via_exp(u));
    }
    case launch::Ew::kGELUBackward: {  // a = grad, b = x
      const float x2 = b * b;
      const float t = tanh_via_exp(kSqrt2OverPi * (b + kGeluCoef * x2 * b));
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * x2);
      return a * (0.5f * (1.0f + t) + 0.5f * b * (1.0f - t * t) * du);
    }
  }
  return 0.0f;
}

// `vec`: 8 when every base is 16-byte aligned (the n % 8 tail then goes element-wise), else 1.
__global__ void elementwise_kernel(launch::Ew op, const void* a, int da, const void* b, int db,
                                   void* o, int dout, int64_t n, float f, int vec) {
  if (vec == 8) {
    for (int64_t t = global_thread(); t < n / 8; t += grid_threads()) {
      float x[8], y[8];
      load8(a, da, t * 8, x);
      if (b) load8(b, db, t * 8, y);
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = apply(op, x[k], b ? y[k] : 0.0f, f);
      store8(o, dout, t * 8, x);
    }
    for (int64_t i = n / 8 * 8 + global_thread(); i < n; i += grid_threads())
      store_f(o, dout, i, apply(op, load_f(a, da, i), b ? load_f(b, db, i) : 0.0f, f));
  } else {
    for (int64_t i = global_thread(); i < n; i += grid_threads())
      store_f(o, dout, i, apply(op, load_f(a, da, i), b ? load_f(b, db, i) : 0.0f, f));
  }
}

// torch.optim.AdamW, _multi_tensor_adamw order (optim.cc); each stored value rounded once.
__device__ __forceinline__ void adam_element(const launch::AdamScalars& s, float& pv, float gv,
                                             float& mv, float& vv, float& d) {
  pv = __fmul_rn(pv, s.decay);
  mv = __fadd_rn(mv, __fmul_rn(s.w1, __fsub_rn(gv, mv)));
  vv = __fadd_rn(__fmul_rn(vv, s.b2), __fmul_rn(__fmul_rn(s.w2, gv), gv));
  d = __fadd_rn(__fdiv_rn(sqrtf(vv), s.bc2_sqrt), s.eps);
  pv = __fadd_rn(pv, __fmul_rn(s.neg_step_size, __fdiv_rn(mv, d)));
}

// NOTE [Multi-tensor AdamW]: kAdamW is one op over every parameter of the step (core/optim/
// adamw.cc); as PyTorch's fused / foreach AdamW (multi_tensor_apply) it runs in a few launches
// instead of one a parameter: up to kAdamTensors parameters' pointers travel in the kernel
// argument (under the 4 KB every CUDA version takes), each cut into kAdamChunk-element chunks, a
// block a chunk (plan::plan_multi_tensor). A tensor whose operands are all 16-byte aligned goes 8
// elements an access (its chunks start at multiples of 8), its last chunk's n % 8 tail and other
// tensors element by element. The math is adam_element for every element either way, so the
// result is the CPU's bit for bit. Nothing is allocated: the op's operands are all it touches,
// and the time model's one kernel for kAdamW (simulator/cost/compute_model.cc) is closer to
// this than to the old launch a parameter.
constexpr int kAdamTensors = 32, kAdamThreads = 512;
constexpr int64_t kAdamChunk = 65536;
struct AdamBatch {
  launch::AdamTensor t[kAdamTensors];
  int64_t first[kAdamTensors + 1];
  bool vec[kAdamTensors];
};

static_assert(sizeof(AdamBatch) + sizeof(launch::AdamScalars) + sizeof(int) <= 4096,
              "kernel arguments over 4 KB");

__device__ int batch_item(const int64_t* first, int count,
                          int64_t block) {  // largest t: first[t] <= block
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void __launch_bounds__(kAdamThreads)
    adamw_multi_kernel(launch::AdamScalars s, AdamBatch b, int count) {
  const int64_t block = blockIdx.x;
  const int ti = batch_item(b.first, count, block);
  const launch::AdamTensor& t = b.t[ti];
  const int64_t begin = (block - b.first[ti]) * kAdamChunk, end = min(t.n, begin + kAdamChunk);
  const int64_t body = b.vec[ti] ? begin + (end - begin) / 8 * 8 : begin;
  for (int64_t i = begin + 8 * static_cast<int64_t>(threadIdx.x); i < body; i += 8 * kAdamThreads) {
    float pv[8], gv[8], mv[8], vv[8], d[8];
    load8(t.p, t.dp, i, pv);
    load8(t.g, t.dg, i, gv);
    load8(t.m, t.dm, i, mv);
    load8(t.v, t.dv, i, vv);
#pragma unroll
    for (int k = 0; k < 8; ++k) adam_element(s, pv[k], gv[k], mv[k], vv[k], d[k]);
    store8(t.po, t.dpo, i, pv);
    store8(t.mo, t.dmo, i, mv);
    store8(t.vo, t.dvo, i, vv);
    if (t.denom) store8(t.denom, t.ddenom, i, d);
  }
  for (int64_t i = body + threadIdx.x; i < end; i += kAdamThreads) {
    float pv = load_f(t.p, t.dp, i), mv = load_f(t.m, t.dm, i), vv = load_f(t.v, t.dv, i), d;
    adam_element(s, pv, load_f(t.g, t.dg, i), mv, vv, d);
    store_f(t.po, t.dpo, i, pv);
    store_f(t.mo, t.dmo, i, mv);
    store_f(t.vo, t.dvo, i, vv);
    if (t.denom) store_f(t.denom, t.ddenom, i, d);
  }
}

// clip_grad_norm_'s scale, multi-tensor as adamw_multi_kernel; fp32 as the CPU:
// coef = min(1, max_norm / (sqrt(total) + 1e-6)).
constexpr int kClipTensors = 64;
struct ClipBatch {
  launch::ClipTensor t[kClipTensors];
  int64_t first[kClipTensors + 1];
  bool vec[kClipTensors];
};
static_assert(sizeof(ClipBatch) + 64 <= 4096, "kernel arguments over 4 KB");

__global__ void __launch_bounds__(kAdamThreads)
    clip_scale_multi_kernel(const void* total, int dtotal, float max_norm, ClipBatch b, int count) {
  const float coef = fminf(1.0f, max_norm / __fadd_rn(sqrtf(load_f(total, dtotal, 0)), 1e-6f));
  const int64_t block = blockIdx.x;
  const int ti = batch_item(b.first, count, block);
  const launch::ClipTensor& t = b.t[ti];
  const int64_t begin = (block - b.first[ti]) * kAdamChunk, end = min(t.n, begin + kAdamChunk);
  const int64_t body = b.vec[ti] ? begin + (end - begin) / 8 * 8 : begin;
  for (int64_t i = begin + 8 * static_cast<int64_t>(threadIdx.x); i < body; i += 8 * kAdamThreads) {
    float x[8];
    load8(t.g, t.dg, i, x);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(x[k], coef);
    store8(t.o, t.dout, i, x);
  }
  for (int64_t i = body + threadIdx.x; i < end; i += kAdamThreads)
    store_f(t.o, t.dout, i, __fmul_rn(load_f(t.g, t.dg, i), coef));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
// 8-element vectors need 16-byte alignment for 16-bit dtypes and 32 bytes' worth for fp32
// (two float4 accesses, each 16-byte aligned when the base is).
bool vec8_ok(const void* p, int64_t n) { return p == nullptr || aligned16(p); }

}  // namespace

namespace launch {

void copy2d_bytes(const Copy2D& c, const void* src, void* dst, int vec, cudaStream_t s) {
  if (copy2d_numel(c) == 0) return;
  const plan::Launch l = plan::launch_1d(copy2d_numel(c) / vec);
  copy2d_bytes_kernel<<<l.grid, l.block, 0, s>>>(c, static_cast<const unsigned char*>(src),
                                                 static_cast<unsigned char*>(dst), vec);
  check_launch("copy2d_bytes");
}

void copy2d_cast(const Copy2D& c, const void* src, int sdt, void* dst, int ddt, int vec,
                 cudaStream_t s) {
  if (copy2d_numel(c) == 0) return;
  const plan::Launch l = plan::launch_1d(copy2d_numel(c) / vec);
  copy2d_cast_kernel<<<l.grid, l.block, 0, s>>>(c, src, sdt, dst, ddt, vec);
  check_launch("copy2d_cast");
}

void fill(void* dst, int64_t nbytes, const unsigned char pattern[16], cudaStream_t s) {
  if (nbytes == 0) return;
  Pattern p;
  for (int i = 0; i < 16; ++i) p.b[i] = pattern[i];
  const plan::Launch l = plan::launch_1d((nbytes + 15) / 16);
  fill_kernel<<<l.grid, l.block, 0, s>>>(static_cast<unsigned char*>(dst), nbytes, p);
  check_launch("fill");
}

void elementwise(Ew op, const void* a, int da, const void* b, int db, void* o, int dout, int64_t n,
                 float f, cudaStream_t s) {
  if (n == 0) return;
  const int vec = n >= 8 && vec8_ok(a, n) && vec8_ok(b, n) && vec8_ok(o, n) ? 8 : 1;
  const plan::Launch l = plan::launch_1d((n + vec - 1) / vec);
  elementwise_kernel<<<l.grid, l.block, 0, s>>>(op, a, da, b, db, o, dout, n, f, vec);
  check_launch("elementwise");
}

void clip_scale(const void* total, int dtotal, float max_norm, const ClipTensor* tensors, int count,
                cudaStream_t s) {
  std::vector<int64_t> numels(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) numels[static_cast<size_t>(i)] = tensors[i].n;
  for (const plan::MultiTensorBatch& pb :
       plan::plan_multi_tensor(numels, kAdamChunk, kClipTensors)) {
    ClipBatch b{};
    for (int k = 0; k < pb.count; ++k) {
      b.t[k] = tensors[pb.first + k];
      b.vec[k] = aligned16(b.t[k].g) && aligned16(b.t[k].o);
    }
    for (int k = 0; k <= pb.count; ++k) b.first[k] = pb.first_block[static_cast<size_t>(k)];
    clip_scale_multi_kernel<<<static_cast<unsigned>(b.first[pb.count]), kAdamThreads, 0, s>>>(
        total, dtotal, max_norm, b, pb.count);
    check_launch("clip_scale");
  }
}

void adamw(const AdamScalars& a, const AdamTensor* tensors, int count, cudaStream_t s) {
  std::vector<int64_t> numels(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) numels[static_cast<size_t>(i)] = tensors[i].n;
  for (const plan::MultiTensorBatch& pb :
       plan::plan_multi_tensor(numels, kAdamChunk, kAdamTensors)) {
    AdamBatch b{};
    for (int k = 0; k < pb.count; ++k) {
      const AdamTensor& t = tensors[pb.first + k];
      b.t[k] = t;
      b.vec[k] = aligned16(t.p) && aligned16(t.g) && aligned16(t.m) && aligned16(t.v) &&
                 aligned16(t.po) && aligned16(t.mo) && aligned16(t.vo) &&
                 (t.denom == nullptr || aligned16(t.denom));
    }
    for (int k = 0; k <= pb.count; ++k) b.first[k] = pb.first_block[static_cast<size_t>(k)];
    adamw_multi_kernel<<<static_cast<unsigned>(b.first[pb.count]), kAdamThreads, 0, s>>>(a, b,
                                                                                         pb.count);
    check_launch("adamw");
  }
}

}  // namespace launch
}  // namespace fullshard::cuda
