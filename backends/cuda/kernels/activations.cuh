#pragma once
// Pointwise activations shared by the eager kernels (elementwise.cu) and the compiled block's
// fused regions (compiled.cu): fp32, in the CPU kernels' order (elementwise.cc, compiled.cc).
// expf is within 2 ulp of glibc's (docs/cuda-kernels.md gives the tolerances this leaves).
#include <cuda_runtime.h>

namespace fullshard::cuda::dev {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
// g * silu'(x) = g s (1 + x (1 - s)), s = sigmoid(x), multiplied left to right.
__device__ __forceinline__ float silu_backward(float g, float x) {
  const float s = sigmoid(x);
  return g * s * (1.0f + x * (1.0f - s));
}

}  // namespace fullshard::cuda::dev
