#pragma once
// The scratch of torch._foreach_norm on CUDA (NOTE [foreach_norm scratch], adamw.cc): shared by
// the model, which allocates it, and the CUDA kernel, which runs in it.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace fullshard {

// Elements per chunk of PyTorch's multi_tensor_apply (kChunkSize,
// aten/src/ATen/native/cuda/MultiTensorApply.cuh).
constexpr int64_t kForeachChunk = 65536;

// fp32 elements of _foreach_norm's output_per_tensor for tensors of these sizes:
// ntensors x max_chunks_per_tensor (0 for no tensors).
inline int64_t foreach_norm_scratch_numel(const std::vector<int64_t>& numels) {
  int64_t max_chunks = 0;
  for (int64_t n : numels)
    max_chunks = std::max(max_chunks, (n + kForeachChunk - 1) / kForeachChunk);
  return static_cast<int64_t>(numels.size()) * max_chunks;
}

}  // namespace fullshard
