#include "backends/cuda/pinned_host.h"

#include <algorithm>

#include "backends/cuda/cuda_error.h"
#include "core/common/error.h"

namespace fullshard::cuda {

PinnedHostMemory::PinnedHostMemory(EventPool& events, std::vector<cudaStream_t> streams)
    : events_(events), streams_(std::move(streams)) {}

PinnedHostMemory::~PinnedHostMemory() {
  try {
    reclaim(true);
  } catch (...) {
    // A broken device: give the memory back anyway.
  }
  for (auto& d : deferred_) {
    cudaFreeHost(d.ptr);
    for (cudaEvent_t e : d.fences) events_.release(e);
  }
  for (auto& [p, bytes] : live_) cudaFreeHost(p);
}

void* PinnedHostMemory::allocate(uint64_t bytes) {
  reclaim(false);
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check_cuda(e, "cudaHostAlloc");
  std::lock_guard<std::mutex> lock(mu_);
  live_.emplace_back(p, bytes);
  live_bytes_ += bytes;
  return p;
}

void PinnedHostMemory::free(void* ptr) {
  if (ptr == nullptr) return;
  Deferred d{ptr, 0, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& l) { return l.first == ptr; });
    FULLSHARD_CHECK(it != live_.end(), "free of pinned host memory that this allocator did not hand out");
    d.bytes = it->second;
    live_bytes_ -= it->second;
    live_.erase(it);
  }
  for (cudaStream_t s : streams_) {
    cudaEvent_t e = events_.acquire();
    FULLSHARD_CUDA(cudaEventRecord(e, s));
    d.fences.push_back(e);
  }
  std::lock_guard<std::mutex> lock(mu_);
  deferred_bytes_ += d.bytes;
  deferred_.push_back(std::move(d));
}

void PinnedHostMemory::reclaim(bool wait) {
  std::lock_guard<std::mutex> lock(mu_);
  auto keep = deferred_.begin();
  for (auto& d : deferred_) {
    bool done = true;
    for (cudaEvent_t e : d.fences) {
      if (wait) FULLSHARD_CUDA(cudaEventSynchronize(e));
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaErrorNotReady) {
        done = false;
        break;
      }
      check_cuda(q, "cudaEventQuery (pinned host free)");
    }
    if (done) {
      for (cudaEvent_t e : d.fences) events_.release(e);
      FULLSHARD_CUDA(cudaFreeHost(d.ptr));
      deferred_bytes_ -= d.bytes;
    } else {
      *keep++ = std::move(d);
    }
  }
  deferred_.erase(keep, deferred_.end());
}

}  // namespace fullshard::cuda
