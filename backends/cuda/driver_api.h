#pragma once
// The CUDA driver calls the backend needs (virtual memory management for expandable segments,
// stream memory operations for staged collectives), looked up at run time (NOTE [Driver API
// without libcuda] in CMakeLists.txt).
#include <cuda.h>

namespace fullshard::cuda {

struct DriverApi {
  decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
  decltype(&::cuMemGetAllocationGranularity) cuMemGetAllocationGranularity = nullptr;
  decltype(&::cuMemAddressReserve) cuMemAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) cuMemAddressFree = nullptr;
  decltype(&::cuMemCreate) cuMemCreate = nullptr;
  decltype(&::cuMemRelease) cuMemRelease = nullptr;
  decltype(&::cuMemMap) cuMemMap = nullptr;
  decltype(&::cuMemUnmap) cuMemUnmap = nullptr;
  decltype(&::cuMemSetAccess) cuMemSetAccess = nullptr;
  decltype(&::cuStreamWaitValue32) cuStreamWaitValue32 = nullptr;
};

// The driver's entry points, or nullptr when there is no driver (or one too old to give them
// all). Looked up once, through the runtime (cudaGetDriverEntryPointByVersion, CUDA 12 ABI).
const DriverApi* driver_api();

}  // namespace fullshard::cuda
