// torch.compile's fused regions of a Llama block (NOTE [Compiled block] in
// core/model/compiled_block.cc) with the CPU kernels' semantics (backends/cpu/kernels/compiled.cc):
// each region loads its inputs once, computes in fp32 and rounds each output once; intermediates
// (h = x + a, silu(a)) stay in registers. The norms are norm_rows.cuh's kernels with the residual
// folded into the load and the store; RoPE and the pointwise regions are here. Nothing allocates:
// the op's outputs, registers and shared memory are all a region uses, as the simulator models.
#include <algorithm>

#include "backends/cuda/kernels/activations.cuh"
#include "backends/cuda/kernels/compiled_launchers.h"
#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/norm_rows.cuh"
#include "backends/cuda/kernels/plan.h"

namespace fullshard::cuda {
namespace {

using namespace dev;

// ---- RoPE.
// NOTE [Compiled RoPE on the GPU]: the rotation of rope.cc (the eager CPU kernel each
// compiled RoPE runs per tensor): inv_freq is the host's fp32 table (rope_inv_freq, Llama 3.1
// scaling included) passed by value, the angle pos * inv_freq is one fp32 product as PyTorch
// forms it (NOTE [RoPE in fp32]), and its cos / sin are taken in double and rounded to fp32 (the
// correctly rounded value, which glibc's cosf / sinf on the CPU side nearly always give; CUDA's
// fp32 sincosf is within 2 ulp). A thread per (token row, pair) computes them once and rotates
// that pair in every head; blockIdx.y picks q or k, so both rotations are one launch.
struct RopeFreqs {
  float inv[launch::kMaxRopePairs];
};
struct RopeArgs {
  launch::RopeTensor t[2];
  int64_t hd;
  bool adjacent;
  float sign;
};

__device__ __forceinline__ void rope_rotate(const launch::RopeTensor& t, const float* inv,
                                            int64_t hd, bool adjacent, float sign) {
  const int64_t half = hd / 2, heads = t.width / hd, items = t.rows * half;
  for (int64_t item = global_thread(); item < items; item += grid_threads()) {
    const int64_t row = item / half, i = item - row * half;
    const float angle = __fmul_rn(static_cast<float>(row % t.S), inv[i]);
    double sd, cd;
    sincos(static_cast<double>(angle), &sd, &cd);
    const float c = static_cast<float>(cd), s = sign * static_cast<float>(sd);
    for (int64_t h = 0; h < heads; ++h) {
      int64_t i1, i2;
      rope_pair(row, t.width, hd, h, i, adjacent, i1, i2);
      const float a = load_f(t.x, t.dx, i1),
                  b = load_f(t.x, t.dx, i2);  // both read before either is written
      store_f(t.y, t.dy, i1, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
      store_f(t.y, t.dy, i2, __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
    }
  }
}

__global__ void compiled_rope_kernel(RopeArgs args, RopeFreqs f) {
  __shared__ float inv[launch::kMaxRopePairs];
  for (int64_t i = threadIdx.x; i < args.hd / 2; i += blockDim.x) inv[i] = f.inv[i];
  __syncthreads();
  // Two inlined calls with constant parameter offsets (no dynamically indexed kernel argument).
  if (blockIdx.y == 0)
    rope_rotate(args.t[0], inv, args.hd, args.adjacent, args.sign);
  else
    rope_rotate(args.t[1], inv, args.hd, args.adjacent, args.sign);
}

// ---- pointwise regions: kIn inputs and kOut outputs of n elements. With every base 16-byte
// aligned a thread takes 8 elements (16-byte accesses: one for bf16 / fp16, two for fp32) and
// the n % 8 tail is scalar; otherwise every element is scalar. A thread loads all its inputs
// before it stores, so an output may be an input (kCompiledResidualAdd writes over f).
struct Operands {
  const void* in[3];
  int din[3];
  void* out[2];
  int dout[2];
};

template <int kIn, int kOut, class F>
__global__ void fused_pointwise_kernel(Operands p, int64_t n, bool vec, F f) {
  const int64_t nv = vec ? n / 8 : 0;
  for (int64_t t = global_thread(); t < nv; t += grid_threads()) {
    float v[kIn][8], r[kOut][8];
#pragma unroll
    for (int k = 0; k < kIn; ++k) load8(p.in[k], p.din[k], t * 8, v[k]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float a[kIn], o[kOut];
#pragma unroll
      for (int k = 0; k < kIn; ++k) a[k] = v[k][j];
      f(a, o);
#pragma unroll
      for (int k = 0; k < kOut; ++k) r[k][j] = o[k];
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) store8(p.out[k], p.dout[k], t * 8, r[k]);
  }
  for (int64_t i = nv * 8 + global_thread(); i < n; i += grid_threads()) {
    float a[kIn], o[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) a[k] = load_f(p.in[k], p.din[k], i);
    f(a, o);
#pragma unroll
    for (int k = 0; k < kOut; ++k) store_f(p.out[k], p.dout[k], i, o[k]);
  }
}

// The regions' maths, in compiled.cc's order of operations.
struct SiluMul {  // (a, b) -> silu(a) * b
  __device__ __forceinline__ void operator()(const float* v, float* o) const {
    o[0] = __fmul_rn(silu(v[0]), v[1]);
  }
};
struct SiluMulBackward {  // (g, a, b) -> (g b s (1 + a (1 - s)), g a s), s = sigmoid(a)
  __device__ __forceinline__ void operator()(const float* v, float* o) const {
    o[0] = silu_backward(__fmul_rn(v[0], v[2]), v[1]);
    o[1] = __fmul_rn(__fmul_rn(v[0], v[1]), sigmoid(v[1]));
  }
};
struct ResidualAdd {  // (x, a, f) -> (x + a) + f
  __device__ __forceinline__ void operator()(const float* v, float* o) const {
    o[0] = __fadd_rn(__fadd_rn(v[0], v[1]), v[2]);
  }
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <int kIn, int kOut, class F>
void pointwise(const Operands& p, int64_t n, F f, cudaStream_t s, const char* what) {
  if (n == 0) return;
  bool vec = true;
  for (int k = 0; k < kIn; ++k) vec = vec && aligned16(p.in[k]);
  for (int k = 0; k < kOut; ++k) vec = vec && aligned16(p.out[k]);
  const plan::Launch l = plan::launch_1d(vec ? (n + 7) / 8 : n);
  fused_pointwise_kernel<kIn, kOut><<<l.grid, l.block, 0, s>>>(p, n, vec, f);
  launch::check_launch(what);
}

}  // namespace

namespace launch {

void compiled_rms_norm(const void* x, int dx, const void* a, int da, const void* w, int dw, void* y,
                       int dy, float* rstd, int64_t rows, int64_t D, double eps, cudaStream_t s) {
  if (a)
    rms_norm_launch(RowXPlusA{x, dx, a, da}, w, dw, y, dy, rstd, rows, D, eps, s,
                    "compiled_add_rms_norm");
  else
    rms_norm_launch(RowX{x, dx}, w, dw, y, dy, rstd, rows, D, eps, s, "compiled_rms_norm");
}

void compiled_rms_norm_backward(const CompiledNormBackward& b, int64_t rows, int64_t D,
                                cudaStream_t s) {
  // gx's storage holds the weight gradient's chunk partials only when it overlaps nothing the op
  // reads (NOTE [Column sums without scratch]).
  const int64_t n = rows * D, gx_bytes = n * esize(b.dgx);
  const bool gx_overlaps_input = overlaps(b.gx, gx_bytes, b.g, n * esize(b.dg)) ||
                                 overlaps(b.gx, gx_bytes, b.x, n * esize(b.dx)) ||
                                 overlaps(b.gx, gx_bytes, b.a, n * esize(b.da)) ||
                                 overlaps(b.gx, gx_bytes, b.gh, n * esize(b.dgh)) ||
                                 overlaps(b.gx, gx_bytes, b.w, D * esize(b.dw)) ||
                                 overlaps(b.gx, gx_bytes, b.rstd, rows * 4);
  if (b.a)
    norm_backward_launch(b.g, b.dg, RowXPlusA{b.x, b.dx, b.a, b.da}, nullptr, b.rstd, b.w, b.dw,
                         b.gh, b.dgh, b.gx, b.dgx, b.gw, b.dgw, nullptr, 0, rows, D,
                         gx_overlaps_input, s);
  else
    norm_backward_launch(b.g, b.dg, RowX{b.x, b.dx}, nullptr, b.rstd, b.w, b.dw, b.gh, b.dgh, b.gx,
                         b.dgx, b.gw, b.dgw, nullptr, 0, rows, D, gx_overlaps_input, s);
}

void compiled_rope(const RopeTensor* t, int count, int64_t hd, bool adjacent, float sign,
                   const float* inv_freq, cudaStream_t s) {
  RopeArgs args{};
  RopeFreqs f{};
  int64_t items = 0;
  for (int k = 0; k < count; ++k) {
    args.t[k] = t[k];
    items = std::max(items, t[k].rows * (hd / 2));
  }
  if (items == 0) return;
  for (int64_t i = 0; i < hd / 2; ++i) f.inv[i] = inv_freq[i];
  args.hd = hd;
  args.adjacent = adjacent;
  args.sign = sign;
  const plan::Launch l = plan::launch_1d(items);
  compiled_rope_kernel<<<dim3(l.grid, static_cast<unsigned>(count)), l.block, 0, s>>>(args, f);
  check_launch("compiled_rope");
}

void compiled_silu_mul(const void* a, int da, const void* b, int db, void* y, int dy, int64_t n,
                       cudaStream_t s) {
  pointwise<2, 1>(Operands{{a, b, nullptr}, {da, db, 0}, {y, nullptr}, {dy, 0}}, n, SiluMul{}, s,
                  "compiled_silu_mul");
}

void compiled_silu_mul_backward(const void* g, int dg, const void* a, int da, const void* b, int db,
                                void* ga, int dga, void* gb, int dgb, int64_t n, cudaStream_t s) {
  pointwise<3, 2>(Operands{{g, a, b}, {dg, da, db}, {ga, gb}, {dga, dgb}}, n, SiluMulBackward{}, s,
                  "compiled_silu_mul_backward");
}

void compiled_residual_add(const void* x, int dx, const void* a, int da, const void* f, int df,
                           void* y, int dy, int64_t n, cudaStream_t s) {
  pointwise<3, 1>(Operands{{x, a, f}, {dx, da, df}, {y, nullptr}, {dy, 0}}, n, ResidualAdd{}, s,
                  "compiled_residual_add");
}

}  // namespace launch
}  // namespace fullshard::cuda
