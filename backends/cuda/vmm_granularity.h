#pragma once
// Pure arithmetic of expandable segments over the driver's virtual memory API: which
// commit/decommit ranges a device with a given allocation granularity can serve.
//
// NOTE [Expandable pages and granules]: CachingAllocator (core/memory/caching_allocator.cc,
// NOTE [Caching allocator rules] 8) commits and decommits expandable segments one page at a
// time, at page-aligned offsets of a reserved range: pages are 2 MiB (kSmallBuffer, small pool)
// and 20 MiB (kLargeBuffer, large pool), as PyTorch's ExpandableSegment segment_size_. The
// driver maps physical memory in whole granules (cuMemGetAllocationGranularity, 2 MiB on every
// current NVIDIA GPU), so every page is a whole number of granules iff the granularity divides
// 2 MiB. CudaSegmentSource checks that once (check_expandable_granularity) and creates one
// physical handle per committed page, as ExpandableSegment creates one per segment_size_.
#include <cstdint>
#include <string>

namespace fullshard::cuda {

inline constexpr uint64_t kExpandablePageUnit = uint64_t{2} << 20;  // gcd of the allocator's pages

constexpr uint64_t round_up_to_granule(uint64_t bytes, uint64_t granularity) {
  return (bytes + granularity - 1) / granularity * granularity;
}

constexpr bool is_granule_aligned(uint64_t address, uint64_t bytes, uint64_t granularity) {
  return granularity != 0 && address % granularity == 0 && bytes % granularity == 0 && bytes > 0;
}

// Throws InputError naming hardware.allocator.expandable_segments when the device's granularity
// does not divide kExpandablePageUnit (its pages could not be mapped in place).
void check_expandable_granularity(uint64_t granularity, const std::string& device_name);

}  // namespace fullshard::cuda
