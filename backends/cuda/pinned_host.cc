#include "backends/cuda/pinned_host.h"

#include <algorithm>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/deferred_frees.h"
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
  for (auto& [bytes, p] : cached_) cudaFreeHost(p);
}

uint64_t PinnedHostMemory::rounded_size(uint64_t bytes) {
  if (bytes > kPowerOfTwoLimit) {  // 1 MiB multiples: under 1 MiB over the request
    if (bytes > ~uint64_t{0} - (kPowerOfTwoLimit - 1))
      return bytes;  // no multiple above it fits in 64 bits
    return (bytes + kPowerOfTwoLimit - 1) / kPowerOfTwoLimit * kPowerOfTwoLimit;
  }
  uint64_t r = 512;
  while (r < bytes) r <<= 1;
  return r;
}

void PinnedHostMemory::release_cached() {
  for (auto& [bytes, p] : cached_) cudaFreeHost(p);
  cached_.clear();
  cached_bytes_ = 0;
}

void* PinnedHostMemory::allocate(uint64_t bytes) {
  reclaim(false);
  const uint64_t size = rounded_size(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cached_.find(size); it != cached_.end()) {
      p = it->second;
      cached_.erase(it);
      cached_bytes_ -= size;
      live_.emplace_back(p, size);
      live_bytes_ += size;
      return p;
    }
  }
  // Outside the lock: cudaHostAlloc may wait for the device, whose staged-Gloo work can need a
  // worker thread that frees through this allocator.
  cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e ==
      cudaErrorMemoryAllocation) {  // NOTE [Pinned host cache]: give the cache back, retry once
    cudaGetLastError();
    bool had_cache = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      had_cache = !cached_.empty();
      release_cached();
    }
    if (had_cache) e = cudaHostAlloc(&p, size, cudaHostAllocPortable | cudaHostAllocMapped);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
  }
  check_cuda(e, "cudaHostAlloc");
  std::lock_guard<std::mutex> lock(mu_);
  live_.emplace_back(p, size);
  live_bytes_ += size;
  return p;
}

void PinnedHostMemory::free(void* ptr) {
  if (ptr == nullptr) return;
  Deferred d{ptr, 0, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it =
        std::find_if(live_.begin(), live_.end(), [&](const auto& l) { return l.first == ptr; });
    FULLSHARD_CHECK(it != live_.end(),
                    "free of pinned host memory that this allocator did not hand out");
    d.bytes = it->second;
    live_bytes_ -= it->second;
    live_.erase(it);
  }
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  for (cudaStream_t s : streams) {
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
  const auto done = [&](const Deferred& d) {
    for (cudaEvent_t e : d.fences) {
      if (wait) FULLSHARD_CUDA(cudaEventSynchronize(e));
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaErrorNotReady) {
        cudaGetLastError();  // NOTE [Not ready is not an error] in cuda_error.h
        return false;
      }
      check_cuda(q, "cudaEventQuery (pinned host free)");
    }
    return true;
  };
  take_finished(deferred_, done, [&](Deferred&& d) {
    for (cudaEvent_t e : d.fences) events_.release(e);
    deferred_bytes_ -= d.bytes;
    cached_.emplace(d.bytes, d.ptr);
    cached_bytes_ += d.bytes;
  });
}

void PinnedHostMemory::add_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(stream);
}

}  // namespace fullshard::cuda
