#include "backends/cuda/stream_timer.h"

#include "backends/cuda/cuda_error.h"

namespace fullshard::cuda {

StreamTimer::~StreamTimer() {
  if (open_) recycle(*open_);
  for (Pending& p : pending_) recycle(p);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  if (anchor_ != nullptr) cudaEventDestroy(anchor_);
}

cudaEvent_t StreamTimer::acquire() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  FULLSHARD_CUDA(cudaEventCreateWithFlags(&e, cudaEventDefault));  // timing enabled
  return e;
}

void StreamTimer::recycle(Pending& p) {
  if (p.begin != nullptr) free_.push_back(p.begin);
  if (p.end != nullptr) free_.push_back(p.end);
  p.begin = p.end = nullptr;
}

void StreamTimer::anchor(cudaStream_t s, const std::function<double()>& now) {
  if (anchor_ == nullptr) FULLSHARD_CUDA(cudaEventCreateWithFlags(&anchor_, cudaEventDefault));
  FULLSHARD_CUDA(cudaEventRecord(anchor_, s));
  FULLSHARD_CUDA(cudaEventSynchronize(anchor_));
  anchor_s_ = now();
}

void StreamTimer::begin(StreamRole r, cudaStream_t s, uint64_t seq, const std::string* group) {
  if (anchor_ == nullptr) return;
  if (open_) recycle(*open_);  // the last enqueue threw between its begin and its end
  Pending p;
  p.work.stream = r;
  p.work.seq = seq;
  if (group != nullptr) p.work.group = *group;
  p.begin = acquire();
  open_ = std::move(p);
  FULLSHARD_CUDA(cudaEventRecord(open_->begin, s));
}

void StreamTimer::end(cudaStream_t s) {
  if (!open_) return;
  open_->end = acquire();
  FULLSHARD_CUDA(cudaEventRecord(open_->end, s));
  pending_.push_back(std::move(*open_));
  open_.reset();
}

std::vector<TimedWork> StreamTimer::take(double* anchor_s) {
  if (open_) {
    recycle(*open_);
    open_.reset();
  }
  std::vector<TimedWork> out;
  out.reserve(pending_.size());
  for (Pending& p : pending_) {
    FULLSHARD_CUDA(cudaEventSynchronize(p.end));
    FULLSHARD_CUDA(cudaEventElapsedTime(&p.work.begin_ms, anchor_, p.begin));
    FULLSHARD_CUDA(cudaEventElapsedTime(&p.work.end_ms, anchor_, p.end));
    out.push_back(std::move(p.work));
    recycle(p);
  }
  pending_.clear();
  *anchor_s = anchor_s_;
  return out;
}

}  // namespace fullshard::cuda
