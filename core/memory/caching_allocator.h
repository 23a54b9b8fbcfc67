#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) that the
// simulator and the real backends share, so reserved bytes agree to the byte.
// See NOTE [Caching allocator rules] in caching_allocator.cc.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace fullshard {

using StreamId = uint32_t;

struct AllocatorOptions {
  // Bytes the allocator may reserve in segments (device memory minus what the CUDA context,
  // NCCL and cuBLAS take outside it). Beyond this an allocation is an OOM.
  uint64_t capacity_bytes = std::numeric_limits<uint64_t>::max();
  bool expandable_segments = false;  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  uint64_t max_split_size_bytes = std::numeric_limits<uint64_t>::max();  // max_split_size_mb
};

// Where segments come from. The simulator uses virtual addresses (the default); a real
// backend maps host or device memory. map() returns nullopt when the memory is not there.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  virtual std::optional<uintptr_t> map(uint64_t bytes) = 0;
  virtual void unmap(uintptr_t address, uint64_t bytes) = 0;

  // Optional, for expandable segments (cuMemAddressReserve / cuMemMap): reserve `bytes` of
  // address space with no memory behind it, then back and un-back pages inside it. A source
  // that cannot returns nullopt from reserve(); expandable segments then keep virtual
  // addresses and map each page separately with map()/unmap() (enough for accounting, not
  // for real data: a block's pages would not be contiguous).
  virtual std::optional<uintptr_t> reserve(uint64_t bytes) { return std::nullopt; }
  virtual bool commit(uintptr_t address, uint64_t bytes) { return false; }
  virtual void decommit(uintptr_t address, uint64_t bytes) {}
  virtual void release(uintptr_t address, uint64_t bytes) {}
};

struct Block {
  uint64_t id = 0;               // unique per allocation
  uint64_t requested_bytes = 0;  // what the caller asked for
  uint64_t size = 0;             // rounded size counted as allocated (0 for a 0-byte request);
                                 // a whole cached block when its remainder was not split
  uintptr_t address = 0;         // segment base + offset (virtual in the simulator)
  StreamId stream = 0;
};

struct AllocatorStats {
  uint64_t allocated_bytes = 0;  // sum of live blocks' rounded sizes
  uint64_t requested_bytes = 0;  // sum of live blocks' requested sizes
  uint64_t reserved_bytes = 0;   // sum of segment sizes (mapped pages for expandable)
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t num_segments = 0;
  uint64_t num_alloc_retries = 0;  // frees of cached segments to satisfy a request
  uint64_t num_ooms = 0;
};

// One segment as torch.cuda.memory_snapshot() lists it: a cudaMalloc'd segment, or one contiguous
// mapped range of an expandable segment.
struct SegmentInfo {
  uintptr_t address = 0;
  uint64_t size = 0;             // reserved bytes of this range
  uint64_t allocated_bytes = 0;  // live blocks' sizes in it
  StreamId stream = 0;
  bool is_small = false;  // small pool (requests <= 1 MiB)
  bool is_expandable = false;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(AllocatorOptions options = {}, SegmentSource* source = nullptr);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullopt means out of memory even after releasing every unused cached segment.
  std::optional<Block> malloc(uint64_t bytes, StreamId stream);
  void free(const Block& block);
  void empty_cache();  // release all unused cached segments
  void reset_peak_stats();
  const AllocatorStats& stats() const;
  const AllocatorOptions& options() const;
  // Segments sorted by address (slow: walks every block; for reports and tests).
  std::vector<SegmentInfo> snapshot() const;
  // Walks every block and checks the allocator's internal invariants (blocks tile their
  // segments, free sets match, stats add up). Throws InternalError on a violation. Slow.
  void check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fullshard
