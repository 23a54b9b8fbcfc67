#include "backends/cuda/stream_set.h"

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/stream_priority.h"

namespace fullshard::cuda {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    ++created_;
  }
  cudaEvent_t e = nullptr;
  FULLSHARD_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void EventPool::release(cudaEvent_t event) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

StreamSet::StreamSet() {
  int least = 0, greatest = 0;
  FULLSHARD_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  for (StreamRole r : kAllStreams) {
    if (stream_is_optional(r)) continue;  // kCudaStreamCount (stream_set.h)
    const size_t i = static_cast<size_t>(r);
    priorities_[i] = stream_priority(r, least, greatest);
    FULLSHARD_CUDA(
        cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, priorities_[i]));
  }
}

StreamSet::~StreamSet() {
  for (cudaStream_t s : streams_) {
    if (s == nullptr) continue;
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
}

void StreamSet::synchronize_all() const {
  for (cudaStream_t s : streams_)
    if (s != nullptr) FULLSHARD_CUDA(cudaStreamSynchronize(s));
}

}  // namespace fullshard::cuda
