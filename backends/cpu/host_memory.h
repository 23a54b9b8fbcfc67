#pragma once
// Real memory for the shared caching allocator on the CPU backend: each segment the
// allocator reserves is an aligned host allocation, so reserved bytes are real bytes.
#include <cstdint>
#include <functional>
#include <optional>

#include "core/memory/caching_allocator.h"

namespace fullshard::cpu {

class HostSegmentSource : public SegmentSource {
 public:
  // Called before a segment is released: a cudaFree synchronizes the device, so the backend
  // drains its streams (nothing may still use the memory).
  std::function<void()> before_unmap;

  std::optional<uintptr_t> map(uint64_t bytes) override;
  void unmap(uintptr_t address, uint64_t bytes) override;
  // Expandable segments: address space reserved with mmap(PROT_NONE, MAP_NORESERVE); pages
  // made readable and writable when committed, returned to the kernel when decommitted.
  std::optional<uintptr_t> reserve(uint64_t bytes) override;
  bool commit(uintptr_t address, uint64_t bytes) override;
  void decommit(uintptr_t address, uint64_t bytes) override;
  void release(uintptr_t address, uint64_t bytes) override;
};

}  // namespace fullshard::cpu
