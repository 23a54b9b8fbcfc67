#pragma once
// The float8 GEMM's staging kernels (scaled_gemm.cu), called by scaled_gemm.cc. Plain C++.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fullshard::cuda::launch {

// inv[0] = 1 / *sa, inv[1] = 1 / *sb (fp32, device pointers).
void inverse_scales(const float* sa, const float* sb, float* inv, cudaStream_t s);
// dst [cols, rows] = src [rows, cols]^T, one byte per element. grid.y = ceil(rows / 32) must stay
// under 65536 (rows < 2,097,152).
void transpose_bytes(const void* src, int64_t rows, int64_t cols, void* dst, cudaStream_t s);

}  // namespace fullshard::cuda::launch
