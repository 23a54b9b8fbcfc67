#include "backends/common/failure_state.h"

namespace fullshard::backends {

void FailureState::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) error_ = std::move(e);
  failed_.store(true, std::memory_order_release);
}

std::exception_ptr FailureState::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void FailureState::rethrow_if_failed() const {
  if (failed()) std::rethrow_exception(error());
}

}  // namespace fullshard::backends
