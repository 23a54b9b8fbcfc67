#pragma once
// Pinned (page-locked) host memory for CPU-offloaded buffers and staging: cudaHostAlloc, so
// copies between it and the device are asynchronous DMA on a stream.
//
// NOTE [Pinned host frees]: the host program frees an offloaded buffer in host order while
// streams may still read or write it (a D2H copy of a gradient queued on the offload stream).
// As PyTorch's CachingHostAllocator does with its per-stream events, free() records an event
// on every stream and the memory is reused only once every stream passed that point; allocate()
// and reclaim() take back the finished ones. The CPU backend does the same with fences
// (backends/cpu/cpu_device.cc, DeferredHostFree).
//
// NOTE [Pinned host cache]: finished buffers are kept, by rounded size (rounded_size: a power
// of two up to 1 MiB, as PyTorch's CachingHostAllocator rounds, then 1 MiB multiples, so that a
// multi-GB offloaded shard or staging buffer takes its size and not up to twice it in pinned
// DRAM), and handed out again; cudaFreeHost runs only when a
// cudaHostAlloc fails (every cached buffer goes back, then one retry) and at teardown. Pinned
// allocation is slow and cudaFreeHost synchronises the device, so freeing in the step would stall
// it every step (the kLoadBatch staging buffer), and with ranks sharing a GPU as threads one
// rank's cudaFreeHost could wait on the other rank's stream parked on a staged-Gloo gate: a
// deadlock. Pinned memory is host memory: none of this shows in the device allocator.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "backends/cuda/stream_set.h"

namespace fullshard::cuda {

class PinnedHostMemory {
 public:
  // `streams`: every stream that may touch the memory. `events` must outlive this.
  PinnedHostMemory(EventPool& events, std::vector<cudaStream_t> streams);
  ~PinnedHostMemory();  // waits for every deferred free, then frees everything left
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;

  // Page-locked, device-mapped memory of at least `bytes` (a cached buffer of the same rounded
  // size when there is one). nullptr when the host is out of pinnable memory.
  void* allocate(uint64_t bytes);
  // Deferred: see NOTE [Pinned host frees].
  void free(void* ptr);
  // One more stream that may touch the memory (an optional stream made at its first use).
  void add_stream(cudaStream_t stream);
  // Takes back deferred frees whose events completed into the cache; with `wait`, waits for all
  // of them first.
  void reclaim(bool wait);

  // Bytes as handed out: each buffer's rounded size (NOTE [Pinned host cache]).
  uint64_t live_bytes() const { return live_bytes_; }          // allocated, not yet freed
  uint64_t deferred_bytes() const { return deferred_bytes_; }  // freed, awaiting streams
  uint64_t cached_bytes() const { return cached_bytes_; }      // reusable
  size_t deferred_count() const { return deferred_.size(); }

  // The size a request of `bytes` is served with: the next power of two, at least 512, up to
  // kPowerOfTwoLimit; above it the next multiple of kPowerOfTwoLimit (the request itself where
  // that would not fit in 64 bits). The memory tracker and the simulator count the requested
  // bytes (peak_host_bytes), which this rounding does not change.
  static constexpr uint64_t kPowerOfTwoLimit = uint64_t{1} << 20;
  static uint64_t rounded_size(uint64_t bytes);

 private:
  struct Deferred {
    void* ptr;
    uint64_t bytes;
    std::vector<cudaEvent_t> fences;
  };
  EventPool& events_;
  std::vector<cudaStream_t> streams_;
  std::mutex mu_;
  std::vector<std::pair<void*, uint64_t>> live_;
  std::vector<Deferred> deferred_;
  std::multimap<uint64_t, void*> cached_;  // rounded size -> buffer
  uint64_t live_bytes_ = 0;
  uint64_t deferred_bytes_ = 0;
  uint64_t cached_bytes_ = 0;
  void release_cached();  // cudaFreeHost of every cached buffer (mu_ held)
};

}  // namespace fullshard::cuda
