#include "backends/cuda/device_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/driver_api.h"
#include "backends/cuda/vmm_granularity.h"
#include "core/common/error.h"

namespace fullshard::cuda {
namespace {

const DriverApi& need_driver() {
  const DriverApi* api = driver_api();
  FULLSHARD_CHECK(api != nullptr,
                  "expandable segments need the CUDA driver's virtual memory API, which this "
                  "driver does not provide");
  return *api;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

CudaSegmentSource::CudaSegmentSource(int device) : device_(device) {}

CudaSegmentSource::~CudaSegmentSource() {
  // The allocator gives everything back in its destructor; whatever is left here (an allocator
  // that outlived us would be a bug) is released without throwing.
  const DriverApi* api = driver_api();
  if (api == nullptr) return;
  if (!handles_.empty() || !reservations_.empty()) cudaDeviceSynchronize();
  for (auto& [addr, h] : handles_) {
    api->cuMemUnmap(static_cast<CUdeviceptr>(addr), h.bytes);
    api->cuMemRelease(static_cast<CUmemGenericAllocationHandle>(h.handle));
  }
  for (auto& [base, bytes] : reservations_)
    api->cuMemAddressFree(static_cast<CUdeviceptr>(base), bytes);
}

void CudaSegmentSource::settle() {
  if (before_unmap) {
    before_unmap();
  } else {
    FULLSHARD_CUDA(cudaDeviceSynchronize());
  }
}

std::optional<uintptr_t> CudaSegmentSource::map(uint64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: the allocator reports the OOM
    return std::nullopt;
  }
  check_cuda(e, "cudaMalloc (allocator segment)");
  return reinterpret_cast<uintptr_t>(p);
}

void CudaSegmentSource::unmap(uintptr_t address, uint64_t bytes) {
  if (before_unmap) before_unmap();
  FULLSHARD_CUDA(cudaFree(reinterpret_cast<void*>(address)));  // synchronizes the device
}

uint64_t CudaSegmentSource::granularity() {
  if (granularity_ != 0) return granularity_;
  const DriverApi& api = need_driver();
  CUmemAllocationProp prop = device_prop(device_);
  size_t g = 0;
  check_driver(api.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               "cuMemGetAllocationGranularity");
  cudaDeviceProp dp{};
  const std::string name = cudaGetDeviceProperties(&dp, device_) == cudaSuccess
                               ? std::string(dp.name)
                               : "CUDA device " + std::to_string(device_);
  check_expandable_granularity(g, name);
  granularity_ = g;
  return granularity_;
}

std::optional<uintptr_t> CudaSegmentSource::reserve(uint64_t bytes) {
  const DriverApi& api = need_driver();
  const uint64_t g = granularity();
  const uint64_t size = round_up_to_granule(bytes, g);
  FULLSHARD_CHECK(size == bytes, "expandable segment of " + std::to_string(bytes) +
                                     " bytes is not a whole number of granules");
  CUdeviceptr ptr = 0;
  const CUresult r = api.cuMemAddressReserve(&ptr, size, g, 0, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  check_driver(r, "cuMemAddressReserve");
  reservations_.emplace(static_cast<uintptr_t>(ptr), size);
  return static_cast<uintptr_t>(ptr);
}

bool CudaSegmentSource::commit(uintptr_t address, uint64_t bytes) {
  const DriverApi& api = need_driver();
  FULLSHARD_CHECK(is_granule_aligned(address, bytes, granularity()),
                  "commit of " + std::to_string(bytes) + " bytes at a non-granule boundary");
  CUmemAllocationProp prop = device_prop(device_);
  CUmemGenericAllocationHandle handle = 0;
  const CUresult r = api.cuMemCreate(&handle, bytes, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;  // the allocator's OOM path takes over
  check_driver(r, "cuMemCreate");
  const CUresult m = api.cuMemMap(static_cast<CUdeviceptr>(address), bytes, 0, handle, 0);
  if (m != CUDA_SUCCESS) {
    api.cuMemRelease(handle);
    check_driver(m, "cuMemMap");
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult a = api.cuMemSetAccess(static_cast<CUdeviceptr>(address), bytes, &access, 1);
  if (a != CUDA_SUCCESS) {
    api.cuMemUnmap(static_cast<CUdeviceptr>(address), bytes);
    api.cuMemRelease(handle);
    check_driver(a, "cuMemSetAccess");
  }
  handles_.emplace(address, Handle{handle, bytes});
  committed_bytes_ += bytes;
  return true;
}

void CudaSegmentSource::unmap_handle(std::map<uintptr_t, Handle>::iterator it) {
  const DriverApi& api = need_driver();
  check_driver(api.cuMemUnmap(static_cast<CUdeviceptr>(it->first), it->second.bytes), "cuMemUnmap");
  check_driver(api.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(it->second.handle)),
               "cuMemRelease");
  committed_bytes_ -= it->second.bytes;
  handles_.erase(it);
}

void CudaSegmentSource::decommit(uintptr_t address, uint64_t bytes) {
  settle();
  // The allocator decommits exactly the pages it committed; a range covers whole handles.
  uintptr_t at = address;
  while (at < address + bytes) {
    auto it = handles_.find(at);
    FULLSHARD_CHECK(it != handles_.end() && at + it->second.bytes <= address + bytes,
                    "decommit of a range that is not made of whole committed pages");
    at += it->second.bytes;
    unmap_handle(it);
  }
}

void CudaSegmentSource::release(uintptr_t address, uint64_t bytes) {
  settle();
  auto r = reservations_.find(address);
  FULLSHARD_CHECK(r != reservations_.end(), "release of address space that was not reserved");
  for (auto it = handles_.lower_bound(address);
       it != handles_.end() && it->first < address + r->second;)
    unmap_handle(it++);
  check_driver(need_driver().cuMemAddressFree(static_cast<CUdeviceptr>(address), r->second),
               "cuMemAddressFree");
  reservations_.erase(r);
}

}  // namespace fullshard::cuda
