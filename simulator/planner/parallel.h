#pragma once
// A minimal work-sharing loop for the planner's independent simulations.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fullshard::planner {

// Calls fn(i) for i in [0, n) on up to `threads` threads (0: the hardware's), taking indices
// in increasing order; fn returns false to stop every thread from taking more. The first
// exception thrown by fn is rethrown here after all threads stopped.
template <typename Fn>
void parallel_for(size_t n, int threads, Fn&& fn) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads =
      static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(n, 1)));
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    while (!stop.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        if (!fn(i)) stop = true;
      } catch (...) {
        std::lock_guard<std::mutex> l(error_mu);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fullshard::planner
