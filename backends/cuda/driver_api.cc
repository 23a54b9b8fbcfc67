#include "backends/cuda/driver_api.h"

#include <cuda_runtime_api.h>

namespace fullshard::cuda {
namespace {

// The ABI version the pointers are declared for (cuda.h of CUDA 12+ maps e.g.
// cuStreamWaitValue32 to its _v2 form, which version 12000 returns).
constexpr unsigned kDriverAbi = 12000;

template <class Fn>
bool load(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, kDriverAbi, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

const DriverApi* load_all() {
  static DriverApi api;
  bool ok = load("cuGetErrorName", api.cuGetErrorName) &&
            load("cuGetErrorString", api.cuGetErrorString) &&
            load("cuMemGetAllocationGranularity", api.cuMemGetAllocationGranularity) &&
            load("cuMemAddressReserve", api.cuMemAddressReserve) &&
            load("cuMemAddressFree", api.cuMemAddressFree) &&
            load("cuMemCreate", api.cuMemCreate) && load("cuMemRelease", api.cuMemRelease) &&
            load("cuMemMap", api.cuMemMap) && load("cuMemUnmap", api.cuMemUnmap) &&
            load("cuMemSetAccess", api.cuMemSetAccess) &&
            load("cuStreamWaitValue32", api.cuStreamWaitValue32);
  return ok ? &api : nullptr;
}

}  // namespace

const DriverApi* driver_api() {
  static const DriverApi* api = load_all();
  return api;
}

}  // namespace fullshard::cuda
