#pragma once
// Pinned (page-locked) host memory for CPU-offloaded buffers and staging: cudaHostAlloc, so
// copies between it and the device are asynchronous DMA on a stream.
//
// NOTE [Pinned host frees]: the host program frees an offloaded buffer in host order while
// streams may still read or write it (a D2H copy of a gradient queued on the offload stream).
// As PyTorch's CachingHostAllocator does with its per-stream events, free() records an event
// on every stream and the memory goes back (cudaFreeHost) only once every stream passed that
// point; allocate() and reclaim() return the finished ones. The CPU backend does the same with
// fences (backends/cpu/cpu_backend.cc, DeferredHostFree).
#include <cstdint>
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

  // Page-locked, device-mapped memory of `bytes` (at least 1). nullptr when the host is out of
  // pinnable memory.
  void* allocate(uint64_t bytes);
  // Deferred: see NOTE [Pinned host frees].
  void free(void* ptr);
  // Returns deferred frees whose events completed; with `wait`, waits for all of them first.
  void reclaim(bool wait);

  uint64_t live_bytes() const { return live_bytes_; }             // allocated, not yet freed
  uint64_t deferred_bytes() const { return deferred_bytes_; }     // freed, awaiting streams
  size_t deferred_count() const { return deferred_.size(); }

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
  uint64_t live_bytes_ = 0;
  uint64_t deferred_bytes_ = 0;
};

}  // namespace fullshard::cuda
