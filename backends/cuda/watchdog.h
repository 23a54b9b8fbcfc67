#pragma once
// The collective watchdog thread of one rank (NOTE [Collective watchdog] in watchdog_state.h):
// polls, every `poll` interval, the completion event of each tracked collective and
// ncclCommGetAsyncError of each watched communicator, aborts communicators that failed or
// whose collective passed its deadline, and keeps the first error for the backend to rethrow.
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "backends/cuda/device_process_group.h"
#include "backends/cuda/nccl_process_group.h"
#include "backends/cuda/stream_set.h"
#include "backends/cuda/watchdog_state.h"

namespace fullshard::cuda {

class CollectiveWatchdog {
 public:
  // `device`: made current on the watchdog thread. `events` must outlive this.
  CollectiveWatchdog(int rank, int device, EventPool& events,
                     std::chrono::milliseconds poll = std::chrono::milliseconds(50));
  ~CollectiveWatchdog();  // stops and joins the thread; releases the tracked events
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Watch a communicator's asynchronous errors (kept alive until this stops).
  void watch(std::shared_ptr<NcclProcessGroup> group);
  // Right after `group.run(args, stream)`: records a completion event on `stream` and
  // gives the collective its deadline.
  void track(const std::shared_ptr<NcclProcessGroup>& group, const CollectiveArgs& args,
             cudaStream_t stream, std::chrono::milliseconds timeout);
  // An error found elsewhere (a staged-Gloo collective): recorded if it is the first, and every
  // communicator is aborted so that nothing waits on the dead peer.
  void report(const std::string& message);
  // The first error, if any.
  std::optional<std::string> error() const;
  // Throws gloo_backend::CollectiveError with the first error, if any.
  void check() const;
  size_t pending() const;

 private:
  int device_;
  EventPool& events_;
  std::chrono::milliseconds poll_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  WatchdogState state_;
  std::map<std::string, std::shared_ptr<NcclProcessGroup>> groups_;  // by group key
  std::map<uint64_t, cudaEvent_t> events_by_id_;
  std::thread thread_;

  void run();
  void tick();
  void abort_all_locked(std::vector<std::shared_ptr<NcclProcessGroup>>& out);
};

}  // namespace fullshard::cuda
