#include "backends/cuda/watchdog.h"

#include "backends/cuda/cuda_error.h"
#include "backends/gloo/process_group.h"

namespace fullshard::cuda {

CollectiveWatchdog::CollectiveWatchdog(int rank, int device, EventPool& events,
                                       std::chrono::milliseconds poll)
    : device_(device), events_(events), poll_(poll), state_(rank) {
  thread_ = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& [id, e] : events_by_id_) events_.release(e);
}

void CollectiveWatchdog::watch(std::shared_ptr<NcclProcessGroup> group) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_[group->group().key()] = std::move(group);
}

void CollectiveWatchdog::track(const std::shared_ptr<NcclProcessGroup>& group,
                               const CollectiveArgs& args, cudaStream_t stream,
                               std::chrono::milliseconds timeout) {
  cudaEvent_t done = events_.acquire();
  FULLSHARD_CUDA(cudaEventRecord(done, stream));
  std::lock_guard<std::mutex> lock(mu_);
  groups_[group->group().key()] = group;
  const uint64_t id = state_.on_enqueue(group->group().key(), group->text(), args.info(),
                                        WatchdogClock::now(), timeout);
  events_by_id_.emplace(id, done);
}

void CollectiveWatchdog::abort_all_locked(std::vector<std::shared_ptr<NcclProcessGroup>>& out) {
  for (auto& [key, g] : groups_) {
    if (!g->aborted()) out.push_back(g);
    state_.mark_aborted(key);
  }
}

void CollectiveWatchdog::report(const std::string& message) {
  std::vector<std::shared_ptr<NcclProcessGroup>> to_abort;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.fail(message);
    abort_all_locked(to_abort);
  }
  for (auto& g : to_abort) g->abort();
}

std::optional<std::string> CollectiveWatchdog::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.error();
}

void CollectiveWatchdog::check() const {
  auto e = error();
  if (e) throw gloo_backend::CollectiveError(*e);
}

size_t CollectiveWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.pending().size();
}

void CollectiveWatchdog::run() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, poll_, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    tick();
    lock.lock();
  }
}

void CollectiveWatchdog::tick() {
  // 1. Snapshot what to look at, without holding the lock during CUDA/NCCL calls.
  std::vector<std::pair<uint64_t, cudaEvent_t>> pending;
  std::vector<std::shared_ptr<NcclProcessGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, e] : events_by_id_) pending.emplace_back(id, e);
    for (auto& [key, g] : groups_) groups.push_back(g);
  }
  std::vector<uint64_t> completed;
  for (auto& [id, e] : pending) {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess)
      completed.push_back(id);
    else
      cudaGetLastError();  // not ready (NOTE [Not ready is not an error]), or a device error the
                           // comm reports
  }
  std::vector<std::pair<std::string, std::string>> failed;  // group key, reason
  for (auto& g : groups) {
    if (g->aborted()) continue;
    const ncclResult_t r = g->async_error();
    if (r != ncclSuccess && r != ncclInProgress)
      failed.emplace_back(g->group().key(), nccl_error_text(r) + " " + g->last_error());
  }
  // 2. Feed the state machine; collect the communicators to abort.
  std::vector<std::shared_ptr<NcclProcessGroup>> to_abort;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = WatchdogClock::now();
    for (uint64_t id : completed) state_.on_complete(id);
    bool any = false;
    for (auto& [key, reason] : failed) any = state_.on_comm_error(key, reason, now) || any;
    any = !state_.on_tick(now).empty() || any;
    if (any) abort_all_locked(to_abort);  // first error wins; nothing may wait on the others
    // Events of collectives no longer pending (completed or dropped by an abort) go back.
    for (auto it = events_by_id_.begin(); it != events_by_id_.end();) {
      if (state_.pending().count(it->first) == 0) {
        events_.release(it->second);
        it = events_by_id_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // 3. Abort outside the lock (ncclCommAbort may take a while).
  for (auto& g : to_abort) g->abort();
}

}  // namespace fullshard::cuda
