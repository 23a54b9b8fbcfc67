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

// The CUDA streams a rank creates up front: every role but the optional ones (the pipeline p2p
// streams and kContextParallel), which StreamSet creates at their first use, so that ranks sharing
// a GPU without pp or cp need no hardware queue for them (NOTE [Staged gates and hardware queues]).
constexpr int kCudaStreamCount = [] {
  int n = 0;
  for (StreamRole r : kAllStreams) n += stream_is_optional(r) ? 0 : 1;
  return n;
}();
static_assert(kCudaStreamCount == 7);

// The optional streams a rank's program uses with a pp dim of `pp` ranks and a cp dim of `cp`:
// kPipelineP2P with pp 2 (its next and previous rank are one), kPipelineP2PPrev too from pp 3
// (pipeline_p2p_stream in core/train/pipeline_p2p.h), kContextParallel with cp 2 or more.
constexpr int optional_streams_used(int pp, int cp) {
  return (pp >= 3 ? 2 : pp == 2 ? 1 : 0) + (cp >= 2 ? 1 : 0);
}

class StreamSet {
 public:
  // Creates the streams on the current device (the caller's cudaSetDevice), non-blocking with
  // respect to the legacy default stream.
  StreamSet();
  ~StreamSet();
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;

  // The role's stream; an optional role's is created here at its first use (on the device
  // current then: the rank's).
  cudaStream_t get(StreamRole r) const;
  int priority(StreamRole r) const { return priorities_[static_cast<size_t>(r)]; }
  std::vector<cudaStream_t> all() const;  // the created ones (kCudaStreamCount and used optional)
  bool created(StreamRole r) const;       // whether get(r) made or would return a stream now
  void synchronize_all() const;           // cudaStreamSynchronize on each

 private:
  mutable std::mutex mu_;  // guards the optional streams' creation
  mutable std::array<cudaStream_t, kNumStreams> streams_{};
  std::array<int, kNumStreams> priorities_{};
};

}  // namespace fullshard::cuda
