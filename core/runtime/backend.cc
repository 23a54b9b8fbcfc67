#include "core/runtime/backend.h"

#include <fmt/format.h>

namespace fullshard {

OutOfMemoryError::OutOfMemoryError(uint64_t requested, MemCategory cat, std::string what,
                                   MemorySnapshot snap, uint64_t capacity)
    : std::runtime_error(fmt::format("out of memory allocating {} bytes for {} ({}); {} bytes "
                                     "allocated, {} reserved of {} capacity",
                                     requested, what, category_key(cat), snap.allocated_bytes,
                                     snap.reserved_bytes, capacity)),
      requested_bytes(requested),
      category(cat),
      what_for(std::move(what)),
      at_failure(snap),
      capacity_bytes(capacity) {}

Backend::Backend(int rank, int world_size, AllocatorOptions allocator, SegmentSource* source,
                 bool record_timeline)
    : rank_(rank), world_size_(world_size), memory_(allocator, source, record_timeline) {}

Buffer Backend::allocate(uint64_t bytes, MemCategory category, StreamRole stream,
                         std::string_view what) {
  auto seq = next_host_seq();
  auto buf = memory_.allocate(bytes, category, stream_id(stream), seq);
  if (!buf) {
    out_of_memory_ = true;
    throw OutOfMemoryError(bytes, category, std::string(what), memory_.current(),
                           memory_.capacity_bytes());
  }
  on_allocate(*buf, stream, what);
  return *buf;
}

Buffer Backend::allocate_host(uint64_t bytes, MemCategory category, std::string_view what) {
  auto buf = memory_.allocate_host(bytes, category, next_host_seq());
  on_allocate(buf, StreamRole::kDefault, what);
  return buf;
}

void Backend::free(const Buffer& buffer) {
  if (!buffer || out_of_memory_) return;
  memory_.free(buffer, next_host_seq());
  on_free(buffer);
}

}  // namespace fullshard
