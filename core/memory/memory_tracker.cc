#include "core/memory/memory_tracker.h"

#include "core/common/error.h"

namespace fullshard {

MemoryTracker::MemoryTracker(AllocatorOptions options, SegmentSource* source, bool record_timeline)
    : allocator_(options, source), record_timeline_(record_timeline) {}

std::optional<Buffer> MemoryTracker::allocate(uint64_t bytes, MemCategory category, StreamId stream,
                                              uint64_t host_seq) {
  auto block = allocator_.malloc(bytes, stream);
  if (!block) return std::nullopt;
  Buffer b;
  b.id = next_id_++;
  b.bytes = bytes;
  b.category = category;
  b.block = *block;
  by_category_[static_cast<int>(category)] += block->size;
  ++live_;
  record(b, true, host_seq);
  return b;
}

Buffer MemoryTracker::allocate_host(uint64_t bytes, MemCategory category, uint64_t host_seq) {
  Buffer b;
  b.id = next_id_++;
  b.bytes = bytes;
  b.category = category;
  b.on_host = true;
  host_bytes_ += bytes;
  if (host_bytes_ > peak_host_) peak_host_ = host_bytes_;
  ++live_;
  record(b, true, host_seq);
  return b;
}

void MemoryTracker::free(const Buffer& b, uint64_t host_seq) {
  FULLSHARD_CHECK(b.id != 0 && live_ > 0, "free of a buffer that is not live");
  if (b.on_host) {
    host_bytes_ -= b.bytes;
  } else {
    by_category_[static_cast<int>(b.category)] -= b.block.size;
    allocator_.free(b.block);
  }
  --live_;
  record(b, false, host_seq);
}

MemorySnapshot MemoryTracker::current() const {
  MemorySnapshot s;
  s.allocated_bytes = allocator_.stats().allocated_bytes;
  s.reserved_bytes = allocator_.stats().reserved_bytes;
  s.host_bytes = host_bytes_;
  s.by_category = by_category_;
  return s;
}

void MemoryTracker::record(const Buffer& b, bool is_alloc, uint64_t host_seq) {
  const auto& st = allocator_.stats();
  if (is_alloc && st.allocated_bytes > peak_allocated_.allocated_bytes) {
    peak_allocated_ = current();
    peak_allocated_.host_seq = host_seq;
  }
  if (is_alloc && st.reserved_bytes > peak_reserved_.reserved_bytes) {
    peak_reserved_ = current();
    peak_reserved_.host_seq = host_seq;
  }
  if (!record_timeline_) return;
  MemoryEvent e;
  e.host_seq = host_seq;
  e.buffer_id = b.id;
  e.is_alloc = is_alloc;
  e.category = b.category;
  e.allocated_bytes = st.allocated_bytes;
  e.reserved_bytes = st.reserved_bytes;
  e.host_bytes = host_bytes_;
  e.by_category = by_category_;
  timeline_.push_back(e);
}

void MemoryTracker::reset_peaks() {
  allocator_.reset_peak_stats();
  peak_allocated_ = current();
  peak_reserved_ = current();
  peak_host_ = host_bytes_;
}

}  // namespace fullshard
