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
    const size_t i = static_cast<size_t>(r);
    priorities_[i] = stream_priority(r, least, greatest);
    if (stream_is_optional(r)) continue;  // at its first use (kCudaStreamCount, stream_set.h)
    FULLSHARD_CUDA(
        cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, priorities_[i]));
  }
}

cudaStream_t StreamSet::get(StreamRole r) const {
  const size_t i = static_cast<size_t>(r);
  if (!stream_is_optional(r)) return streams_[i];
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_[i] == nullptr)  // a null stream would be the legacy default one: never handed out
    FULLSHARD_CUDA(
        cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, priorities_[i]));
  return streams_[i];
}

bool StreamSet::created(StreamRole r) const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_[static_cast<size_t>(r)] != nullptr;
}

std::vector<cudaStream_t> StreamSet::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<cudaStream_t> v;
  for (cudaStream_t s : streams_)
    if (s != nullptr) v.push_back(s);
  return v;
}

StreamSet::~StreamSet() {
  for (cudaStream_t s : streams_) {
    if (s == nullptr) continue;
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
}

void StreamSet::synchronize_all() const {
  for (cudaStream_t s : all()) FULLSHARD_CUDA(cudaStreamSynchronize(s));
}

}  // namespace fullshard::cuda
