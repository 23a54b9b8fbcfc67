#include "backends/cpu/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>

namespace fullshard::cpu {

namespace {
constexpr uint64_t kAlignment = 4096;  // page alignment; every block offset is a multiple of 512
}

std::optional<uintptr_t> HostSegmentSource::map(uint64_t bytes) {
  const uint64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) return std::nullopt;
  return reinterpret_cast<uintptr_t>(p);
}

void HostSegmentSource::unmap(uintptr_t address, uint64_t bytes) {
  if (before_unmap) before_unmap();
  std::free(reinterpret_cast<void*>(address));
}

std::optional<uintptr_t> HostSegmentSource::reserve(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return std::nullopt;
  return reinterpret_cast<uintptr_t>(p);
}

bool HostSegmentSource::commit(uintptr_t address, uint64_t bytes) {
  if (mprotect(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE) != 0) return false;
  return true;
}

void HostSegmentSource::decommit(uintptr_t address, uint64_t bytes) {
  if (before_unmap) before_unmap();  // as unmap: nothing may still use the pages
  void* p = reinterpret_cast<void*>(address);
  madvise(p, bytes, MADV_DONTNEED);  // give the memory back; the range stays reserved
  mprotect(p, bytes, PROT_NONE);
}

void HostSegmentSource::release(uintptr_t address, uint64_t bytes) {
  if (before_unmap) before_unmap();
  munmap(reinterpret_cast<void*>(address), bytes);
}

}  // namespace fullshard::cpu
