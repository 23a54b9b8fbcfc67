#pragma once
// The float8 cast kernels (float8.cu; NOTE [Float8 casts on the GPU] in float8_plan.h), called by
// float8_dispatch.cc. Plain C++: pointers are device addresses, dtypes DCode values
// (index_math.h), and every launcher only enqueues on `s`.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fullshard::cuda::launch {

// y = |x| over n elements.
void float8_abs(const void* x, int dx, void* y, int dy, int64_t n, cudaStream_t s);
// amax of |x| ([rows, cols]) into `amax` (dtype da): tensorwise (granularity 0), per row (axis
// -1) or per column (axis 0, `rows_per_block` rows a block). Zeroes `amax` first where the plan
// says so (tensorwise, per column).
void float8_amax(const void* x, int dx, int64_t rows, int64_t cols, int64_t granularity,
                 int64_t axis, int64_t rows_per_block, void* amax, int da, cudaStream_t s);
// scale[i] = amax_to_scale(amax[i]) for n values (fp32 out).
void float8_scale(const void* amax, int da, float* scale, int64_t n, int target, bool pow2,
                  cudaStream_t s);
// The eager cast's steps: 1 y = x.to(dy); 2 y = x * scale[scale index] (fp32); 3 y = clamp(x,
// -max, max) (fp32); 4 y = float8 codes of x (fp32 in).
void float8_cast_step(int step, const void* x, int dx, const float* scale, void* y, int dy,
                      int64_t rows, int64_t cols, int64_t granularity, int64_t axis, int target,
                      cudaStream_t s);
// The compiled cast: scale = amax_to_scale(amax) (scale_numel values), then the saturated cast
// of x * scale into float8 codes.
void float8_cast_compiled(const void* x, int dx, const void* amax, int da, uint8_t* y, float* scale,
                          int64_t rows, int64_t cols, int64_t granularity, int64_t axis,
                          int64_t scale_numel, int target, bool pow2, cudaStream_t s);

}  // namespace fullshard::cuda::launch
