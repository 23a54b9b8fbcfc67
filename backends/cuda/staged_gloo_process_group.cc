#include "backends/cuda/staged_gloo_process_group.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda.h>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/driver_api.h"
#include "core/common/error.h"

namespace fullshard::cuda {

int device_max_connections(const char* env) {
  if (env == nullptr || *env == '\0') return kDefaultDeviceMaxConnections;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0')
    return kDefaultDeviceMaxConnections;  // as CUDA: not a number, the default
  return static_cast<int>(std::clamp<long>(v, 1, kMaxDeviceMaxConnections));
}

std::string shared_device_refusal(int ranks, int streams_per_rank, int connections, int device) {
  const int streams = ranks * streams_per_rank + 1;  // + the legacy default stream
  if (ranks <= 1 || streams <= connections) return "";
  return std::to_string(ranks) + " ranks share GPU " + std::to_string(device) +
         " in this process with " + std::to_string(streams) + " streams, more than its " +
         std::to_string(connections) +
         " hardware queues: one rank's staged collective could block another rank's copies and "
         "hang both "
         "(NOTE [Staged gates and hardware queues])";
}

std::string shared_device_fix(int streams_per_rank) {
  return "run one rank per process (fullshard train and compare do), or set "
         "CUDA_DEVICE_MAX_CONNECTIONS=32 "
         "before the process starts (up to " +
         std::to_string((kMaxDeviceMaxConnections - 1) / streams_per_rank) + " ranks per GPU then)";
}

StagedGlooProcessGroup::StagedGlooProcessGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                                               std::shared_ptr<::gloo::transport::Device> transport,
                                               const ProcessGroup& group, int global_rank,
                                               int device,
                                               gloo_backend::ProcessGroupOptions options,
                                               PinnedHostMemory& pinned, EventPool& events,
                                               std::function<void(const std::string&)> on_failure)
    : store_(std::move(store)),
      transport_(std::move(transport)),
      group_(group),
      global_rank_(global_rank),
      rank_(group.index_of(global_rank)),
      device_(device),
      options_(std::move(options)),
      pinned_(pinned),
      events_(events),
      on_failure_(std::move(on_failure)) {
  FULLSHARD_CHECK(rank_ >= 0, "rank " + std::to_string(global_rank) + " is not a member of group " +
                                  group.name);
  FULLSHARD_CHECK(driver_api() != nullptr,
                  "staged Gloo collectives need the CUDA driver's cuStreamWaitValue32");
  void* flag = nullptr;
  check_cuda(cudaHostAlloc(&flag, sizeof(uint32_t), cudaHostAllocPortable | cudaHostAllocMapped),
             "cudaHostAlloc (staged collective flag)");
  flag_ = static_cast<uint32_t*>(flag);
  __atomic_store_n(flag_, 0u, __ATOMIC_SEQ_CST);
  void* dev = nullptr;
  check_cuda(cudaHostGetDevicePointer(&dev, flag, 0),
             "cudaHostGetDevicePointer (staged collective flag)");
  flag_device_ = reinterpret_cast<uint64_t>(dev);
  worker_ = std::thread([this] { run(); });
}

StagedAllToAll staged_all_to_all(const CollectiveArgs& args, int group_size) {
  StagedAllToAll l;
  l.input_bytes = args.input_bytes(group_size);
  l.output_offset = (l.input_bytes + 15) / 16 * 16;
  l.output_bytes = args.output_bytes(group_size);
  l.total = l.output_offset + l.output_bytes;
  return l;
}

StagedGlooProcessGroup::~StagedGlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  gloo_.reset();
  // Streams may still wait on the flag or copy from staging: let them pass first.
  cudaDeviceSynchronize();
  cudaFreeHost(flag_);
  if (staging_ != nullptr) pinned_.free(staging_);
}

bool StagedGlooProcessGroup::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void StagedGlooProcessGroup::run(const CollectiveArgs& a, cudaStream_t stream) {
  const size_t e = dtype_size(a.dtype);
  const size_t w = static_cast<size_t>(group_.size());
  const StagedAllToAll a2a = a.kind == CollectiveKind::kAllToAll
                                 ? staged_all_to_all(a, group_.size())
                                 : StagedAllToAll{};
  const size_t need = std::max<size_t>(
      {a.input_bytes(group_.size()), a.output_bytes(group_.size()), a2a.total, 1});
  if (need > staging_bytes_) {
    if (staging_ != nullptr) pinned_.free(staging_);  // deferred until the streams passed it
    staging_ = static_cast<uint8_t*>(pinned_.allocate(need));
    FULLSHARD_CHECK(staging_ != nullptr,
                    "pinned host staging of " + std::to_string(need) + " bytes failed");
    staging_bytes_ = need;
  }
  const size_t chunk = a.count * e;
  // 1. device -> staging, at the place the host collective reads its input from.
  switch (a.kind) {
    case CollectiveKind::kAllGather:
      if (chunk > 0)
        FULLSHARD_CUDA(
            cudaMemcpyAsync(staging_ + rank_ * chunk, a.input, chunk, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kReduceScatter:
      if (chunk > 0)
        FULLSHARD_CUDA(cudaMemcpyAsync(staging_, a.input, chunk * w, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kAllReduce:
      if (chunk > 0)
        FULLSHARD_CUDA(cudaMemcpyAsync(staging_, a.input, chunk, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kBroadcast:
      if (chunk > 0)
        FULLSHARD_CUDA(cudaMemcpyAsync(staging_, a.output, chunk, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kBarrier: break;
    case CollectiveKind::kAllToAll:  // this rank's splits, at the staging's start
      if (a2a.input_bytes > 0)
        FULLSHARD_CUDA(
            cudaMemcpyAsync(staging_, a.input, a2a.input_bytes, cudaMemcpyDefault, stream));
      break;
  }
  cudaEvent_t ready = events_.acquire();
  FULLSHARD_CUDA(cudaEventRecord(ready, stream));
  const uint32_t seq = ++issued_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{a, ready, seq, staging_});
  }
  cv_.notify_all();
  // 2. the stream waits for the worker (NOTE [Staged collectives in stream order]).
  check_driver(driver_api()->cuStreamWaitValue32(stream, static_cast<CUdeviceptr>(flag_device_),
                                                 seq, CU_STREAM_WAIT_VALUE_GEQ),
               "cuStreamWaitValue32 (staged collective)");
  // 3. staging -> device.
  switch (a.kind) {
    case CollectiveKind::kAllGather:
      if (chunk > 0)
        FULLSHARD_CUDA(cudaMemcpyAsync(a.output, staging_, chunk * w, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kReduceScatter:
      if (chunk > 0)
        FULLSHARD_CUDA(
            cudaMemcpyAsync(a.output, staging_ + rank_ * chunk, chunk, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
      if (chunk > 0)
        FULLSHARD_CUDA(cudaMemcpyAsync(a.output, staging_, chunk, cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kAllToAll:
      if (a2a.output_bytes > 0)
        FULLSHARD_CUDA(cudaMemcpyAsync(a.output, staging_ + a2a.output_offset, a2a.output_bytes,
                                       cudaMemcpyDefault, stream));
      break;
    case CollectiveKind::kBarrier: break;
  }
}

void StagedGlooProcessGroup::signal(uint32_t seq) {
  __atomic_store_n(flag_, seq, __ATOMIC_SEQ_CST);  // x86 stores reach the device in order
}

void StagedGlooProcessGroup::run() {
  cudaSetDevice(device_);
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    run_one(job);
    events_.release(job.ready);
    signal(job.seq);
  }
}

void StagedGlooProcessGroup::run_one(Job& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;  // skipped after a failure (the flag still advances)
  }
  const CollectiveArgs& a = job.args;
  try {
    check_cuda(cudaEventSynchronize(job.ready), "cudaEventSynchronize (staged collective input)");
    if (!gloo_)
      gloo_ = std::make_unique<backends::GlooCollectiveGroup>(store_, transport_, group_,
                                                              global_rank_, options_);
    // The same args on the staging buffer: all-gather and reduce-scatter in place at this
    // rank's chunk, all-reduce and broadcast over the whole of it.
    const size_t chunk = a.count * dtype_size(a.dtype);
    uint8_t* s = job.staging;
    CollectiveArgs staged = a;
    staged.input = a.kind == CollectiveKind::kAllGather ? s + rank_ * chunk : s;
    staged.output = a.kind == CollectiveKind::kReduceScatter ? s + rank_ * chunk : s;
    if (a.kind == CollectiveKind::kAllToAll)  // input and output side by side
      staged.output = s + staged_all_to_all(a, group_.size()).output_offset;
    gloo_->run(staged, backends::CallingThread{});
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = true;
    }
    if (on_failure_) on_failure_(e.what());
  }
}

}  // namespace fullshard::cuda
