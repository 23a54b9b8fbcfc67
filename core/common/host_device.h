#pragma once
// FULLSHARD_HOST_DEVICE marks a function that both the host compiler and nvcc compile (for the
// host and for the device): __host__ __device__ under nvcc, nothing elsewhere. Core headers use
// it for the few pure functions a CUDA kernel must compute exactly as the host does.
#if defined(__CUDACC__)
#define FULLSHARD_HOST_DEVICE __host__ __device__
#else
#define FULLSHARD_HOST_DEVICE
#endif
