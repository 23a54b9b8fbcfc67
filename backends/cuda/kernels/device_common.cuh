#pragma once
// Device helpers shared by the .cu files: dtype-generic scalar and 8-wide loads / stores (the
// dtype is a runtime code, uniform across a launch, so the branch costs no divergence), and
// deterministic block reductions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/index_math.h"

namespace fullshard::cuda::dev {

__device__ __forceinline__ float load_f(const void* p, int dt, int64_t i) {
  switch (dt) {
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Round-to-nearest-even into the storage dtype (core/tensor/float_convert.h on the host).
__device__ __forceinline__ void store_f(void* p, int dt, int64_t i, float v) {
  switch (dt) {
    case kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// Elements [i, i+8) when i is a multiple of 8 and the base is aligned for 8-element vectors:
// one 16-byte access for bf16 / fp16, two for fp32.
__device__ __forceinline__ void load8(const void* p, int dt, int64_t i, float* v) {
  if (dt == kF32) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const float4 a = q[0], b = q[1];
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
    return;
  }
  const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint16_t lo = static_cast<uint16_t>(w[k] & 0xffffu),
                   hi = static_cast<uint16_t>(w[k] >> 16);
    if (dt == kBF16) {
      v[2 * k] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
      v[2 * k + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
    } else {
      v[2 * k] = __half2float(__ushort_as_half(lo));
      v[2 * k + 1] = __half2float(__ushort_as_half(hi));
    }
  }
}

__device__ __forceinline__ uint16_t to_bits(int dt, float f) {
  return dt == kBF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f))
                     : __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ void store8(void* p, int dt, int64_t i, const float* v) {
  if (dt == kF32) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = static_cast<uint32_t>(to_bits(dt, v[2 * k])) |
           (static_cast<uint32_t>(to_bits(dt, v[2 * k + 1])) << 16);
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p) + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Sum over the block in a fixed order (warp shuffles, then warp 0 over the warp sums): the same
// inputs give the same bits on every run. `scratch` holds 32 values; every thread gets the sum.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? scratch[lane] : T(0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? scratch[lane] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace fullshard::cuda::dev
