#pragma once
// Byte-exact accounting of one rank's memory by category, on top of the caching allocator.
// Every allocation and free of every backend goes through here, in host-program order.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "core/memory/category.h"

namespace fullshard {

// A live allocation. Device buffers come from the caching allocator; host buffers (CPU
// offload) are counted separately and exactly (no rounding).
struct Buffer {
  uint64_t id = 0;  // unique within a tracker, never reused; 0 means "no buffer"
  uint64_t bytes = 0;
  MemCategory category = MemCategory::kTemporary;
  bool on_host = false;
  Block block;  // device only
  explicit operator bool() const { return id != 0; }
};

// One point of the memory timeline: the state right after an allocation or free.
struct MemoryEvent {
  uint64_t host_seq = 0;  // caller's host-program position, mapped to time by the simulator
  uint64_t buffer_id = 0;
  bool is_alloc = true;
  MemCategory category = MemCategory::kTemporary;
  uint64_t allocated_bytes = 0;  // device, after this event
  uint64_t reserved_bytes = 0;   // device, after this event
  uint64_t host_bytes = 0;       // CPU-offloaded bytes, after this event
  CategoryBytes by_category{};   // device allocated bytes per category, after this event
};

struct MemorySnapshot {
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t host_bytes = 0;
  CategoryBytes by_category{};
  uint64_t host_seq = 0;
};

class MemoryTracker {
 public:
  explicit MemoryTracker(AllocatorOptions options = {}, SegmentSource* source = nullptr,
                         bool record_timeline = true);

  // nullopt: the device allocator is out of memory (the caller reports OOM).
  std::optional<Buffer> allocate(uint64_t bytes, MemCategory category, StreamId stream,
                                 uint64_t host_seq);
  Buffer allocate_host(uint64_t bytes, MemCategory category, uint64_t host_seq);
  void free(const Buffer& buffer, uint64_t host_seq);

  const AllocatorStats& allocator_stats() const { return allocator_.stats(); }
  uint64_t capacity_bytes() const { return allocator_.options().capacity_bytes; }
  MemorySnapshot current() const;
  // State when allocated bytes first reached their peak (the breakdown users ask for).
  const MemorySnapshot& at_peak_allocated() const { return peak_allocated_; }
  const MemorySnapshot& at_peak_reserved() const { return peak_reserved_; }
  uint64_t peak_host_bytes() const { return peak_host_; }
  const std::vector<MemoryEvent>& timeline() const { return timeline_; }
  bool records_timeline() const { return record_timeline_; }
  // Keeps (or stops keeping) the timeline from the next event on: a measured run asks for one on
  // a backend created without it (NOTE [Measured timeline] in runner/rank_runner.cc).
  void set_record_timeline(bool on) { record_timeline_ = on; }
  uint64_t live_buffers() const { return live_; }
  // Forget peaks (not live state): PyTorch's reset_peak_memory_stats().
  void reset_peaks();

 private:
  CachingAllocator allocator_;
  bool record_timeline_;
  uint64_t next_id_ = 1;
  uint64_t live_ = 0;
  uint64_t host_bytes_ = 0;
  uint64_t peak_host_ = 0;
  CategoryBytes by_category_{};
  MemorySnapshot peak_allocated_;
  MemorySnapshot peak_reserved_;
  std::vector<MemoryEvent> timeline_;
  void record(const Buffer& b, bool is_alloc, uint64_t host_seq);
};

}  // namespace fullshard
