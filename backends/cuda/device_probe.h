#pragma once
// What the launcher asks about the machine before it starts ranks: how many GPUs, their memory
// and names. Every function works (and says "none") on a machine without a driver or a GPU.
#include <cstdint>
#include <optional>
#include <string>

namespace fullshard::cuda {

// cudaGetDeviceCount, or 0 when it fails (no driver: cudaErrorInsufficientDriver; a driver
// but no device: cudaErrorNoDevice). Honours CUDA_VISIBLE_DEVICES, as CUDA does.
int gpu_count();

struct DeviceMemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
};
// cudaMemGetInfo on `device` (made current on the calling thread); nullopt when it fails.
std::optional<DeviceMemoryInfo> device_memory(int device);
// "NVIDIA H100 80GB HBM3", or nullopt.
std::optional<std::string> device_name(int device);

// The device a rank uses: LOCAL_RANK (torchrun convention), wrapped around the visible GPUs
// when several local ranks share them (only the staged-Gloo transport allows that,
// collective_transport.h). Requires visible_gpus >= 1 and local_rank >= 0.
int device_for_local_rank(int local_rank, int visible_gpus);

}  // namespace fullshard::cuda
