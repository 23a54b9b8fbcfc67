#pragma once
// The collective watchdog's bookkeeping, in plain C++ (no CUDA, no NCCL, no clock of its own):
// which collectives are in flight, when each is due, which communicators must be aborted and
// which error the rank reports. watchdog.h runs it on a thread against real events and
// communicators; tests drive it with a fake clock.
//
// NOTE [Collective watchdog]: an NCCL collective whose peer died or stalled never completes,
// and a host that waits for it (cudaEventSynchronize, cudaFree) would hang forever. As
// ProcessGroupNCCL's watchdog does (ncclCommWatchdog / checkTimeout), every collective gets a
// deadline = its enqueue time + the timeout; a thread watches the event recorded right after
// it, and polls ncclCommGetAsyncError on every communicator. On an asynchronous error or a
// passed deadline it aborts that communicator (ncclCommAbort: its kernels return, so every
// stream and host wait behind them ends) and records a CollectiveError naming this rank, the
// collective (name, kind, count, dtype), the group and the elapsed time. The backend rethrows
// it at the next host call. As NOTE [Failure propagation] (backends/cpu/stream_worker.h): never
// hang, and the first error wins; later ones (other groups aborted because of the first, the
// aborted collectives behind it) are not reported over it.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/gloo/fingerprint.h"

namespace fullshard::cuda {

using WatchdogClock = std::chrono::steady_clock;

class WatchdogState {
 public:
  explicit WatchdogState(int rank) : rank_(rank) {}

  // A collective enqueued on group `group_key` ("name [0,1,2]" in `group_text`) at `now`.
  // Returns its id (for on_complete).
  uint64_t on_enqueue(const std::string& group_key, const std::string& group_text,
                      const gloo_backend::CallInfo& call, WatchdogClock::time_point now,
                      std::chrono::milliseconds timeout);
  // The event recorded after collective `id` completed.
  void on_complete(uint64_t id);
  // ncclCommGetAsyncError reported `reason` (not ncclSuccess / ncclInProgress) for the group.
  // Returns true when the group's communicator must now be aborted (the first time).
  bool on_comm_error(const std::string& group_key, const std::string& reason,
                     WatchdogClock::time_point now);
  // Groups whose oldest pending collective passed its deadline at `now` and that were not yet
  // aborted: the caller aborts each. Records the timeout error (the first one wins).
  std::vector<std::string> on_tick(WatchdogClock::time_point now);

  struct Pending {
    uint64_t id;
    std::string group_key;
    gloo_backend::CallInfo call;
    WatchdogClock::time_point enqueued;
    WatchdogClock::time_point deadline;
  };
  const std::map<uint64_t, Pending>& pending() const { return pending_; }
  bool aborted(const std::string& group_key) const;
  // The first error, if any (what the backend rethrows).
  const std::optional<std::string>& error() const { return error_; }
  // An error found outside NCCL (a staged-Gloo collective): recorded if it is the first.
  void fail(std::string message) { record(std::move(message)); }
  // A group aborted because of another error: its pending collectives are dropped and its
  // later errors ignored.
  void mark_aborted(const std::string& group_key) { drop_group(group_key); }

 private:
  int rank_;
  uint64_t next_id_ = 0;
  std::map<uint64_t, Pending> pending_;            // by id == issue order
  std::map<std::string, std::string> group_text_;  // key -> "name [ranks]"
  std::map<std::string, bool> aborted_;
  std::optional<std::string> error_;

  const Pending* oldest_pending(const std::string& group_key) const;
  std::string who(const std::string& group_key) const;
  void record(std::string message);
  void drop_group(const std::string& group_key);
};

}  // namespace fullshard::cuda
