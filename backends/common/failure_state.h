#pragma once
// The first error of a real backend's asynchronous work (a CPU stream worker's task, a CUDA
// host function): kept once, seen by every later host call.
//
// NOTE [First error wins]: fail() keeps only the first exception; failed() is a lock-free read
// the hot paths make before issuing work, error() the exception to rethrow. Work that runs after
// a failure is skipped by its runner (StreamWorker, the CUDA backend's host tasks), so a poisoned
// backend never runs half a step on top of an error.
#include <atomic>
#include <exception>
#include <mutex>

namespace fullshard::backends {

class FailureState {
 public:
  void fail(std::exception_ptr e);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::exception_ptr error() const;
  // Rethrows the first error, if any.
  void rethrow_if_failed() const;

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::exception_ptr error_;
};

}  // namespace fullshard::backends
