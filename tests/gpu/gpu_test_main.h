#pragma once
// main() of a GPU test: exit 77 (ctest: skipped) when no GPU is visible, else run the gtests
// on device 0 (or the device named by FULLSHARD_TEST_DEVICE), with CUDA_DEVICE_MAX_CONNECTIONS 32
// unless the environment sets it.
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "backends/cuda/device_probe.h"

int main(int argc, char** argv) {
  // Ranks as threads sharing the GPU (staged Gloo): one hardware queue per stream, set before CUDA
  // creates the context (NOTE [Staged gates and hardware queues] in staged_gloo_process_group.h).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  const int n = fullshard::cuda::gpu_count();
  if (n < 1) {
    std::printf("no GPU visible (cudaGetDeviceCount failed or returned 0): skipped\n");
    return 77;
  }
  const char* d = std::getenv("FULLSHARD_TEST_DEVICE");
  cudaSetDevice(d != nullptr ? std::atoi(d) : 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
