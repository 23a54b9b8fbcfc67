#pragma once
// The float8 GEMMs' staging memory on the CUDA backend (NOTE [Float8 GEMM staging]).
#include <array>
#include <cstddef>

#include <cuda_runtime_api.h>

#include "core/runtime/stream.h"

namespace fullshard::cuda {

// NOTE [Float8 GEMM staging]: cuBLASLt's float8 GEMM runs only the TN layout (NOTE [Float8
// GEMMs in cuBLASLt]), so the grads stage transposed float8 copies of their operands, plus the
// two reciprocal scales (plan_scaled_gemm(op).scratch_bytes: for Llama 3.1 8B's FFN grad weight
// at 8192 tokens, 8192 x (14336 + 4096) bytes, 144 MiB). torchao makes the same copies
// (`b.t().contiguous().t()` in torch._scaled_mm's preprocessing) from PyTorch's caching
// allocator; here they live in one buffer per stream that the device holds outside its caching
// allocator, grown at a float8 GEMM that needs more than it holds (the stream is synchronized,
// the smaller buffer freed, a larger one cudaMalloc'd: the first step, then never again) and
// freed with the device. The simulator does not see it: predicted and measured allocator peaks
// stay byte-exact, and the bytes count in the device's non-allocator memory
// (CudaBackend::non_allocator_bytes), which torchao on PyTorch would have in its allocator
// instead. Growing in 1 MiB steps.
class Float8Staging {
 public:
  Float8Staging() = default;
  Float8Staging(const Float8Staging&) = delete;
  Float8Staging& operator=(const Float8Staging&) = delete;
  ~Float8Staging();

  // At least `bytes` (256-byte aligned) for float8 GEMMs on `role`, enqueued on `stream`.
  // Throws std::runtime_error naming the bytes when cudaMalloc fails.
  void* reserve(StreamRole role, cudaStream_t stream, size_t bytes);
  // Bytes held over every stream.
  size_t held_bytes() const;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::array<Block, kNumStreams> blocks_{};
};

}  // namespace fullshard::cuda
