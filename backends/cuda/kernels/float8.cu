// torchao's float8 casts on the GPU (NOTE [Float8 casts on the GPU] in float8_plan.h): |x|, the
// amax, amax_to_scale and the saturated cast, bit for bit as the CPU kernels.
#include <cstdint>
#include <string>

#include "backends/cuda/kernels/device_common.cuh"
#include "backends/cuda/kernels/float8_launch.h"
#include "backends/cuda/kernels/launchers.h"
#include "core/common/error.h"
#include "core/tensor/float8.h"

namespace fullshard::cuda::launch {

namespace {

using dev::load_f;
using dev::store_f;

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? b : 4096);  // grid-stride beyond
}

__device__ __forceinline__ float fp8_max(int target) { return target == 1 ? 57344.0f : 448.0f; }

// amax_to_scale (NOTE [Float8 on the CPU]): float64 clamp, reciprocal and product, .to(float32);
// power-of-two scales as torch's CUDA kernels round them.
__device__ __forceinline__ float amax_to_scale(float amax, int target, bool pow2) {
  double a = static_cast<double>(amax);
  if (!isnan(a) && a < 1e-12) a = 1e-12;
  const double r = 1.0 / a;
  float s = __double2float_rn(r * static_cast<double>(fp8_max(target)));
  if (pow2) s = exp2f(floorf(log2f(s)));
  return s;
}

__device__ __forceinline__ float clamp_nan(float v, float lo, float hi) {
  if (isnan(v)) return v;
  return v < lo ? lo : (v > hi ? hi : v);
}

__device__ __forceinline__ uint8_t to_float8(float v, int target) {
  constexpr Float8Format e4m3 = kFloat8E4M3FN;
  constexpr Float8Format e5m2 = kFloat8E5M2;
  return target == 1 ? float_to_float8(v, e5m2, false) : float_to_float8(v, e4m3, false);
}

// |v|'s fp32 bits: non-negative, so unsigned order is value order, and NaNs sort above +inf.
__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

__device__ __forceinline__ uint32_t block_max_bits(uint32_t v, uint32_t* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < warps ? scratch[lane] : 0u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = max(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

// out[i] = max(out[i], |value|) in out's dtype, atomically (out holds non-negative values or NaN).
__device__ void atomic_max_abs(void* out, int d, int64_t i, uint32_t bits) {
  if (d == kF32) {
    atomicMax(static_cast<unsigned int*>(out) + i, bits);
    return;
  }
  const float v = __uint_as_float(bits);
  const unsigned short b = d == kBF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                      : __half_as_ushort(__float2half_rn(v));
  unsigned short* p = static_cast<unsigned short*>(out) + i;
  unsigned short old = *p;
  while (old < b) {
    const unsigned short prev = atomicCAS(p, old, b);
    if (prev == old) break;
    old = prev;
  }
}

__global__ void abs_kernel(const void* x, int dx, void* y, int dy, int64_t n) {
  for (int64_t i = dev::global_thread(); i < n; i += dev::grid_threads())
    store_f(y, dy, i, fabsf(load_f(x, dx, i)));
}

__global__ void amax_tensor_kernel(const void* x, int dx, int64_t n, void* amax, int da) {
  __shared__ uint32_t scratch[32];
  uint32_t m = 0;
  for (int64_t i = dev::global_thread(); i < n; i += dev::grid_threads())
    m = max(m, abs_bits(load_f(x, dx, i)));
  m = block_max_bits(m, scratch);
  if (threadIdx.x == 0) atomic_max_abs(amax, da, 0, m);
}

__global__ void amax_rows_kernel(const void* x, int dx, int64_t cols, void* amax, int da) {
  __shared__ uint32_t scratch[32];
  const int64_t r = blockIdx.x;
  uint32_t m = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    m = max(m, abs_bits(load_f(x, dx, r * cols + j)));
  m = block_max_bits(m, scratch);
  if (threadIdx.x == 0) store_f(amax, da, r, __uint_as_float(m));
}

__global__ void amax_columns_kernel(const void* x, int dx, int64_t rows, int64_t cols,
                                    int64_t rows_per_block, void* amax, int da) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  uint32_t m = 0;
  for (int64_t r = r0; r < r1; ++r) m = max(m, abs_bits(load_f(x, dx, r * cols + c)));
  if (r1 > r0) atomic_max_abs(amax, da, c, m);
}

__global__ void scale_kernel(const void* amax, int da, float* scale, int64_t n, int target,
                             bool pow2) {
  for (int64_t i = dev::global_thread(); i < n; i += dev::grid_threads())
    scale[i] = amax_to_scale(load_f(amax, da, i), target, pow2);
}

__global__ void cast_step_kernel(int step, const void* x, int dx, const float* scale, void* y,
                                 int dy, int64_t n, int64_t cols, int64_t granularity, int64_t axis,
                                 int target) {
  const float mx = fp8_max(target);
  for (int64_t e = dev::global_thread(); e < n; e += dev::grid_threads()) {
    switch (step) {
      case 1: store_f(y, dy, e, load_f(x, dx, e)); break;
      case 2:
        static_cast<float*>(y)[e] = __fmul_rn(
            static_cast<const float*>(x)[e], scale[float8_scale_index(granularity, axis, cols, e)]);
        break;
      case 3:
        static_cast<float*>(y)[e] = clamp_nan(static_cast<const float*>(x)[e], -mx, mx);
        break;
      default: static_cast<uint8_t*>(y)[e] = to_float8(static_cast<const float*>(x)[e], target);
    }
  }
}

__global__ void cast_compiled_kernel(const void* x, int dx, const float* scale, uint8_t* y,
                                     int64_t n, int64_t cols, int64_t granularity, int64_t axis,
                                     int target) {
  const float mx = fp8_max(target);
  for (int64_t e = dev::global_thread(); e < n; e += dev::grid_threads()) {
    const float v =
        __fmul_rn(load_f(x, dx, e), scale[float8_scale_index(granularity, axis, cols, e)]);
    y[e] = to_float8(clamp_nan(v, -mx, mx), target);
  }
}

int64_t dsize(int d) { return d == kF32 ? 4 : 2; }

}  // namespace

void float8_abs(const void* x, int dx, void* y, int dy, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  abs_kernel<<<grid_for(n), kThreads, 0, s>>>(x, dx, y, dy, n);
  check_launch("float8 abs");
}

void float8_amax(const void* x, int dx, int64_t rows, int64_t cols, int64_t granularity,
                 int64_t axis, int64_t rows_per_block, void* amax, int da, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (granularity == 1 && axis == -1) {  // one block per row, stored
    if (rows == 0) return;
    amax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, dx, cols, amax, da);
    check_launch("float8 amax per row");
    return;
  }
  const int64_t outs = granularity == 0 ? 1 : cols;
  if (outs == 0) return;
  const cudaError_t z = cudaMemsetAsync(amax, 0, static_cast<size_t>(outs * dsize(da)), s);
  FULLSHARD_CHECK(
      z == cudaSuccess,
      std::string("CUDA kernel launch 'float8 amax zeroing' failed: ") + cudaGetErrorString(z));
  if (n == 0) return;
  if (granularity == 0) {
    amax_tensor_kernel<<<grid_for(n), kThreads, 0, s>>>(x, dx, n, amax, da);
    check_launch("float8 amax");
    return;
  }
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                  static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  amax_columns_kernel<<<grid, kThreads, 0, s>>>(x, dx, rows, cols, rows_per_block, amax, da);
  check_launch("float8 amax per column");
}

void float8_scale(const void* amax, int da, float* scale, int64_t n, int target, bool pow2,
                  cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(amax, da, scale, n, target, pow2);
  check_launch("float8 scale");
}

void float8_cast_step(int step, const void* x, int dx, const float* scale, void* y, int dy,
                      int64_t rows, int64_t cols, int64_t granularity, int64_t axis, int target,
                      cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  cast_step_kernel<<<grid_for(n), kThreads, 0, s>>>(step, x, dx, scale, y, dy, n, cols, granularity,
                                                    axis, target);
  check_launch("float8 cast");
}

void float8_cast_compiled(const void* x, int dx, const void* amax, int da, uint8_t* y, float* scale,
                          int64_t rows, int64_t cols, int64_t granularity, int64_t axis,
                          int64_t scale_numel, int target, bool pow2, cudaStream_t s) {
  float8_scale(amax, da, scale, scale_numel, target, pow2, s);
  const int64_t n = rows * cols;
  if (n == 0) return;
  cast_compiled_kernel<<<grid_for(n), kThreads, 0, s>>>(x, dx, scale, y, n, cols, granularity, axis,
                                                        target);
  check_launch("float8 compiled cast");
}

}  // namespace fullshard::cuda::launch
