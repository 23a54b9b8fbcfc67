// The float8 GEMM's staging kernels (NOTE [Float8 GEMMs in cuBLASLt] in scaled_gemm_plan.h): the
// reciprocal of each operand's tensorwise scale, and the byte transpose of a float8 operand.
#include <cstdint>

#include "backends/cuda/kernels/scaled_gemm_launch.h"

namespace fullshard::cuda::launch {

namespace {

__global__ void inverse_scales_kernel(const float* sa, const float* sb, float* inv) {
  if (threadIdx.x == 0) {
    inv[0] = 1.0f / sa[0];  // torchao: a_scale.reciprocal() (fp32)
    inv[1] = 1.0f / sb[0];
  }
}

constexpr int kTile = 32;

// dst [cols, rows] = src [rows, cols]^T through a shared tile (padded against bank conflicts).
__global__ void transpose_bytes_kernel(const uint8_t* src, int64_t rows, int64_t cols,
                                       uint8_t* dst) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

void inverse_scales(const float* sa, const float* sb, float* inv, cudaStream_t s) {
  inverse_scales_kernel<<<1, 32, 0, s>>>(sa, sb, inv);
}

void transpose_bytes(const void* src, int64_t rows, int64_t cols, void* dst, cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  const dim3 block(kTile, 8);
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  transpose_bytes_kernel<<<grid, block, 0, s>>>(static_cast<const uint8_t*>(src), rows, cols,
                                                static_cast<uint8_t*>(dst));
}

}  // namespace fullshard::cuda::launch
