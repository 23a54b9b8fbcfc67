#pragma once
// Gloo collectives on device tensors, staged through pinned host memory, so that several ranks
// can share one GPU (NCCL refuses two ranks on one device). One instance per (group, stream),
// as the CPU backend keeps one GlooProcessGroup per (group, stream) (NOTE [Gloo threading
// rule] in backends/gloo/process_group.h).
//
// NOTE [Staged collectives in stream order]: run() queues, on the stream:
//   1. cudaMemcpyAsync device -> staging (pinned host), then an event `ready`;
//   2. cuStreamWaitValue32(flag >= n): the stream stalls until the host says collective n is done;
//   3. cudaMemcpyAsync staging -> device.
// and hands collective n to this group's worker thread, which waits for `ready`
// (cudaEventSynchronize), runs the GlooProcessGroup collective on the staging buffer, and
// stores n into the flag (pinned, device-mapped host memory). The host thread never blocks, a
// stream blocks only itself, and no CUDA host callback is used (a host function that blocked
// on a peer would hold CUDA's callback thread, which other streams and other ranks in the same
// process share). One staging buffer serves every kind: all-gather and reduce-scatter run in
// place in it (input at this rank's chunk), all-reduce and broadcast over the whole of it;
// all-to-all-v (expert parallelism's token dispatch) cannot run in place, so its staging holds
// the input's splits, then the output's (staged_all_to_all).
// The worker runs one collective at a time in issue order, so reusing the buffer is safe; it
// grows (the old one freed after the streams passed, NOTE [Pinned host frees]).
// Staging memory is pinned host memory: not in the device allocator, reported as host bytes.
//
// Failure: a Gloo error (peer died, timeout) is passed to `on_failure` (the watchdog's report:
// first error wins, the backend rethrows it); the flag is still advanced, so the stream never
// waits forever, and every later collective of the group is skipped.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/common/gloo_collective_group.h"
#include "backends/cuda/device_process_group.h"
#include "backends/cuda/pinned_host.h"
#include "backends/gloo/process_group.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::cuda {

// NOTE [Staged gates and hardware queues]: a CUDA context feeds its streams to the GPU through
// CUDA_DEVICE_MAX_CONNECTIONS hardware work queues (8 unless the variable says otherwise, at
// most 32, read when the context is created); with more streams than queues, streams share a
// queue, and a command at a queue's head holds every command behind it, whatever its stream.
// A staged collective's gate (cuStreamWaitValue32) is such a command, released only once every
// member's worker ran the collective, and a member's worker first waits for that member's
// `ready` event. Ranks in separate processes have separate contexts, hence separate queues: no
// cycle. Ranks as threads of one process share the primary context: when rank A's gate for
// collective n sits in a queue ahead of rank B's copy and `ready` for the same n, B's worker
// never starts, A's gate never opens, and both wait until the Gloo timeout. That is the GPU run's
// StagedGlooProcessGroup.TwoRanksShareOneGpu (four collectives passed, the barrier timed out:
// the order of the two threads' commands in a shared queue decides where) and the hang of
// CudaBackend.TensorParallelMatchesCpuBackendAndPrediction (4 thread-ranks, 28 streams), while
// the same scenarios as processes passed. So ranks sharing a device in one process are safe only
// while every stream of theirs has a queue of its own: the CUDA backend refuses more (one line
// naming the counts and both fixes), and the GPU tests' main() sets
// CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts. (A second hazard of thread-ranks, device-
// wide synchronisation in one rank's host thread while another rank's gate waits for it, is kept
// out of the step: NOTE [Pinned host cache], and settle_streams before unmapping.)
constexpr int kDefaultDeviceMaxConnections = 8;
constexpr int kMaxDeviceMaxConnections = 32;
// The hardware queues a context created with CUDA_DEVICE_MAX_CONNECTIONS = `env` (nullptr:
// unset) has: the default when unset, empty or not a number, else the value clamped to [1, 32].
int device_max_connections(const char* env);
// "" when `ranks` ranks of one process on one device, `streams_per_rank` streams each (plus the
// legacy default stream), fit `connections` queues or are one rank; else what is wrong, and
// shared_device_fix the fix (the backend's InputError on CUDA_DEVICE_MAX_CONNECTIONS).
std::string shared_device_refusal(int ranks, int streams_per_rank, int connections, int device);
std::string shared_device_fix(int streams_per_rank);

// All-to-all-v on the staging buffer: the splits this rank sends (input_bytes) at its start, the
// splits it receives (output_bytes) from output_offset (16-byte aligned), `total` bytes in all.
// Both fill a prefix of their device buffers (NOTE [One collective decoding]).
struct StagedAllToAll {
  size_t input_bytes = 0, output_offset = 0, output_bytes = 0, total = 0;
};
StagedAllToAll staged_all_to_all(const CollectiveArgs& args, int group_size);

class StagedGlooProcessGroup : public DeviceProcessGroup {
 public:
  // The GlooProcessGroup is constructed on the worker thread at the first collective (members
  // meet there, in the same order). `pinned` and `events` must outlive this. `device`: CUDA
  // ordinal made current on the worker.
  StagedGlooProcessGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                         std::shared_ptr<::gloo::transport::Device> transport,
                         const ProcessGroup& group, int global_rank, int device,
                         gloo_backend::ProcessGroupOptions options, PinnedHostMemory& pinned,
                         EventPool& events, std::function<void(const std::string&)> on_failure);
  ~StagedGlooProcessGroup() override;  // finishes queued collectives, joins the worker

  const ProcessGroup& group() const override { return group_; }
  int rank() const override { return rank_; }
  void run(const CollectiveArgs& args, cudaStream_t stream) override;

  uint64_t staging_bytes() const { return staging_bytes_; }  // pinned host bytes held
  bool failed() const;

 private:
  struct Job {
    CollectiveArgs args;
    cudaEvent_t ready;
    uint32_t seq;
    uint8_t* staging;
  };
  std::shared_ptr<::gloo::rendezvous::Store> store_;
  std::shared_ptr<::gloo::transport::Device> transport_;
  ProcessGroup group_;
  int global_rank_;
  int rank_;
  int device_;
  gloo_backend::ProcessGroupOptions options_;
  PinnedHostMemory& pinned_;
  EventPool& events_;
  std::function<void(const std::string&)> on_failure_;

  uint8_t* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;
  uint32_t* flag_ = nullptr;  // pinned, device-mapped; the worker stores the last done seq
  uint64_t flag_device_ = 0;  // its device address (CUdeviceptr)
  uint32_t issued_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  bool failed_ = false;
  std::unique_ptr<backends::GlooCollectiveGroup> gloo_;  // worker thread only
  std::thread worker_;

  void run();
  void run_one(Job& job);
  void signal(uint32_t seq);
};

}  // namespace fullshard::cuda
