#pragma once
// One NCCL communicator per process group (core/mesh/device_mesh.h), created non-blocking
// (ncclConfig_t.blocking = 0) so that the watchdog can abort it from its own thread (NOTE
// [Collective watchdog] in watchdog_state.h).
//
// NOTE [NCCL serialises a communicator]: see docs/cuda-backend.md, "NCCL serialisation". In
// short (NCCL v2.28.9, src/enqueue.cc): ncclLaunchPrepare makes the launching user stream wait
// on the communicator's internal strong stream `comm->sharedRes->deviceStream`
// (ncclStrongStreamAcquire + ncclStreamWaitStream), and ncclLaunchFinish records
// `finishedEvent` on the user stream after the kernel and advances deviceStream to it
// (ncclStreamAdvanceToEvent). So every collective's kernel starts after the previous
// collective of the same communicator completed, in the order the host issued them, whatever
// streams issued them: an all-gather issued on the all_gather stream and a reduce-scatter on
// the reduce_scatter stream over the same group never overlap. Different communicators (HSDP's
// shard and replicate groups) are not ordered by this (NCCL_LAUNCH_ORDER_IMPLICIT defaults to
// 0 in src/enqueue.cc). The simulator's engine models the same rule.
//
// NOTE [Non-blocking launches]: with blocking = 0, NCCL's group end (src/group.cc,
// ncclGroupEndInternal) hands the launch to a thread (groupLaunchNonBlocking) and returns
// ncclInProgress; the kernel is on the stream only once ncclCommGetAsyncError stops saying
// ncclInProgress. run() waits for that (bounded by the timeout: the first collective also
// connects the peers, which blocks while a peer is missing) so that events recorded after it
// order after the kernel, as ProcessGroupNCCL does for non-blocking communicators.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include <nccl.h>

#include "backends/cuda/device_process_group.h"

namespace gloo::rendezvous {
class Store;
}

namespace fullshard::cuda {

struct NcclProcessGroupOptions {
  // Communicator creation and each launch (a collective's own deadline is the watchdog's).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Tells apart several communicators over the same ranks (NOTE [Unique id keys]).
  std::string instance = "default";
};

class NcclProcessGroup : public DeviceProcessGroup {
 public:
  // Collective over the members: every member constructs it, in the same order. The calling
  // thread's current device is the communicator's. `store` may be null for a group of one.
  // Throws gloo_backend::CollectiveError when the members do not all arrive within the timeout.
  NcclProcessGroup(std::shared_ptr<::gloo::rendezvous::Store> store, const ProcessGroup& group,
                   int global_rank, NcclProcessGroupOptions options = {});
  ~NcclProcessGroup() override;  // ncclCommDestroy, or nothing more after an abort

  const ProcessGroup& group() const override { return group_; }
  int rank() const override { return rank_; }
  // Throws gloo_backend::CollectiveError when the launch fails or does not finish within the
  // timeout (the communicator is then aborted), or when the group was aborted before.
  void run(const CollectiveArgs& args, cudaStream_t stream) override;

  // Point-to-point, as ProcessGroupNCCL's send / recv (ncclSend / ncclRecv on `stream`):
  // `count` elements of `dtype` to / from member `peer` (a group rank, not this one); the pair
  // matches in issue order on the communicator (NCCL orders a communicator's work). What the
  // CUDA backend's pipeline stages run, one communicator per channel (NOTE [Pipeline p2p on the
  // CUDA backend] in pipeline_transfer.h). Errors as run().
  void send(const void* buffer, size_t count, DType dtype, int peer, cudaStream_t stream,
            const std::string& name);
  void recv(void* buffer, size_t count, DType dtype, int peer, cudaStream_t stream,
            const std::string& name);

  // ncclCommGetAsyncError (thread-safe); ncclSuccess once aborted, ncclInProgress while the
  // host thread is inside a launch.
  ncclResult_t async_error() const;
  // The last error message NCCL gave for this communicator (ncclGetLastError).
  std::string last_error() const;
  // ncclCommAbort, once; safe from any thread. Pending kernels of the communicator return.
  void abort();
  bool aborted() const { return aborted_.load(); }

 private:
  ProcessGroup group_;
  int global_rank_;
  int rank_;
  NcclProcessGroupOptions options_;
  ncclComm_t comm_ = nullptr;
  mutable std::mutex launch_mu_;  // one launch at a time; abort waits for a launch in progress
  std::atomic<bool> aborted_{false};
  void* barrier_word_ = nullptr;  // pinned host float for barriers (see launch)

  void release_barrier_word();

  std::string who() const;
  // Polls ncclCommGetAsyncError until it leaves ncclInProgress; aborts and throws on an error
  // or when `deadline` passes. `what` names the operation.
  void wait_ready(std::chrono::steady_clock::time_point deadline, const std::string& what);
  void launch(const CollectiveArgs& a, cudaStream_t stream);
  void point_to_point(bool send, void* buffer, size_t count, DType dtype, int peer,
                      cudaStream_t stream, const std::string& name);
};

}  // namespace fullshard::cuda
