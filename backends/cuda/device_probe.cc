#include "backends/cuda/device_probe.h"

#include <cuda_runtime_api.h>

#include "core/common/error.h"

namespace fullshard::cuda {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n < 0 ? 0 : n;
}

std::optional<DeviceMemoryInfo> device_memory(int device) {
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return DeviceMemoryInfo{total, free};
}

std::optional<std::string> device_name(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return std::string(p.name);
}

int device_for_local_rank(int local_rank, int visible_gpus) {
  FULLSHARD_CHECK(visible_gpus >= 1 && local_rank >= 0,
                  "device_for_local_rank needs a GPU and a rank");
  return local_rank % visible_gpus;
}

}  // namespace fullshard::cuda
