#pragma once
// Device memory for the shared caching allocator on the CUDA backend: every segment the
// allocator reserves is real device memory, so reserved bytes are the device's bytes.
//
// Classic segments: cudaMalloc / cudaFree (cudaFree synchronizes the device; before_unmap runs
// first so that the backend can also settle its host-side work). Expandable segments: address
// space from cuMemAddressReserve, each committed page backed by one cuMemCreate handle mapped
// with cuMemMap + cuMemSetAccess, decommitted with cuMemUnmap + cuMemRelease, released with
// cuMemAddressFree: PyTorch's ExpandableSegment (c10/cuda/CUDACachingAllocator.cpp). See NOTE
// [Expandable pages and granules] in vmm_granularity.h.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "core/memory/caching_allocator.h"

namespace fullshard::cuda {

class CudaSegmentSource : public SegmentSource {
 public:
  // `device`: the CUDA ordinal every segment lives on (made current by the caller's thread).
  explicit CudaSegmentSource(int device);
  ~CudaSegmentSource() override;
  CudaSegmentSource(const CudaSegmentSource&) = delete;
  CudaSegmentSource& operator=(const CudaSegmentSource&) = delete;

  // Called before memory is given back (unmap, decommit, release): nothing may still use it.
  // When unset, the source synchronizes the device itself (cudaDeviceSynchronize): cuMemUnmap,
  // unlike cudaFree, does not wait for the kernels that use the pages.
  std::function<void()> before_unmap;

  std::optional<uintptr_t> map(uint64_t bytes) override;
  void unmap(uintptr_t address, uint64_t bytes) override;
  std::optional<uintptr_t> reserve(uint64_t bytes) override;
  bool commit(uintptr_t address, uint64_t bytes) override;
  void decommit(uintptr_t address, uint64_t bytes) override;
  void release(uintptr_t address, uint64_t bytes) override;

  // cuMemGetAllocationGranularity (minimum) of the device; 0 before the first expandable use
  // when the driver API is missing.
  uint64_t granularity();
  uint64_t committed_bytes() const { return committed_bytes_; }

 private:
  int device_;
  uint64_t granularity_ = 0;
  uint64_t committed_bytes_ = 0;
  std::map<uintptr_t, uint64_t> reservations_;  // base -> bytes
  struct Handle {
    unsigned long long handle;  // CUmemGenericAllocationHandle
    uint64_t bytes;
  };
  std::map<uintptr_t, Handle> handles_;  // committed address -> its physical handle

  void settle();
  void unmap_handle(std::map<uintptr_t, Handle>::iterator it);
};

}  // namespace fullshard::cuda
