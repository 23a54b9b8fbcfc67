#include "backends/cpu/host_memory.h"

#include <cstdlib>

namespace fullshard::cpu {

namespace {
constexpr uint64_t kAlignment = 4096;  // page alignment; every block offset is a multiple of 512
}

std::optional<uintptr_t> HostSegmentSource::map(uint64_t bytes) {
  const uint64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) return std::nullopt;
  mapped_ += bytes;
  return reinterpret_cast<uintptr_t>(p);
}

void HostSegmentSource::unmap(uintptr_t address, uint64_t bytes) {
  if (before_unmap) before_unmap();
  std::free(reinterpret_cast<void*>(address));
  mapped_ -= bytes;
}

}  // namespace fullshard::cpu
