#pragma once
// The CUDA streams and events of one rank: one cudaStream_t per StreamRole (NOTE [Stream
// priorities]) and a pool of timing-free events (cudaEventDisableTiming: FSDP2's events only
// order streams, and timing-free events are cheaper to record and wait on).
#include <array>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/runtime/stream.h"

namespace fullshard::cuda {

class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t acquire();            // a recycled or new event (cudaEventDisableTiming)
  void release(cudaEvent_t event);  // back to the pool; the caller no longer waits on it
  size_t created() const { return created_; }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
  size_t created_ = 0;
};

// The CUDA streams a rank creates: every role but the optional ones (the pipeline p2p streams and
// kContextParallel), which the simulator and the CPU backend play (the CUDA backend refuses a pp
// or cp mesh dim), so ranks sharing a GPU need no queue for them.
constexpr int kCudaStreamCount = [] {
  int n = 0;
  for (StreamRole r : kAllStreams) n += stream_is_optional(r) ? 0 : 1;
  return n;
}();
static_assert(kCudaStreamCount == 7);

class StreamSet {
 public:
  // Creates the streams on the current device (the caller's cudaSetDevice), non-blocking with
  // respect to the legacy default stream.
  StreamSet();
  ~StreamSet();
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;

  cudaStream_t get(StreamRole r) const { return streams_[static_cast<size_t>(r)]; }
  int priority(StreamRole r) const { return priorities_[static_cast<size_t>(r)]; }
  std::vector<cudaStream_t> all() const {  // the created ones (kCudaStreamCount)
    std::vector<cudaStream_t> v;
    for (cudaStream_t s : streams_)
      if (s != nullptr) v.push_back(s);
    return v;
  }
  void synchronize_all() const;  // cudaStreamSynchronize on each

 private:
  std::array<cudaStream_t, kNumStreams> streams_{};
  std::array<int, kNumStreams> priorities_{};
};

}  // namespace fullshard::cuda
