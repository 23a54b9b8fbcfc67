#pragma once
// A stream of the CPU backend: one worker thread running its queue of tasks in order, as a
// CUDA stream runs its kernels. Events are completion markers one stream records and others
// (or the host) wait for.
//
// NOTE [Failure propagation]: a task that throws (a collective whose peer died, a kernel
// bug) poisons the whole backend: the error is kept, every later task of every stream is
// skipped, and every event completes (so no stream or host waits forever). The host sees the
// first error at its next synchronize() or launch.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/common/failure_state.h"

namespace fullshard::cpu {

// Shared failure state of one backend's streams (NOTE [First error wins]).
using backends::FailureState;

class CpuEvent {
 public:
  void complete();
  void wait();  // blocks until complete()
  bool done() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

class StreamWorker {
 public:
  StreamWorker(std::string name, FailureState& failure);
  ~StreamWorker();  // drains the queue, then joins
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // Queues `task`; runs after everything queued before it. Skipped once the backend failed.
  void enqueue(std::function<void()> task);
  // Queues a marker that completes `event` (also when skipping after a failure).
  void record(std::shared_ptr<CpuEvent> event);
  // Queues a wait: later tasks of this stream start after `event` completes.
  void wait(std::shared_ptr<CpuEvent> event);
  // Host side: blocks until everything queued so far has run (or was skipped).
  void drain();
  const std::string& name() const { return name_; }

 private:
  struct Item {
    std::function<void()> task;
    std::shared_ptr<CpuEvent> record;  // set for record markers
    std::shared_ptr<CpuEvent> wait;    // set for waits
  };
  std::string name_;
  FailureState& failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;

  void push(Item item);
  void run();
};

}  // namespace fullshard::cpu
