#include "backends/cpu/stream_worker.h"

namespace fullshard::cpu {

void CpuEvent::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void CpuEvent::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

bool CpuEvent::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

StreamWorker::StreamWorker(std::string name, FailureState& failure)
    : name_(std::move(name)), failure_(failure), thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StreamWorker::push(Item item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(item));
  }
  cv_.notify_all();
}

void StreamWorker::enqueue(std::function<void()> task) {
  push(Item{std::move(task), nullptr, nullptr});
}
void StreamWorker::record(std::shared_ptr<CpuEvent> event) {
  push(Item{nullptr, std::move(event), nullptr});
}
void StreamWorker::wait(std::shared_ptr<CpuEvent> event) {
  push(Item{nullptr, nullptr, std::move(event)});
}

void StreamWorker::drain() {
  auto e = std::make_shared<CpuEvent>();
  record(e);
  e->wait();
}

void StreamWorker::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (item.record) {
      item.record->complete();
    } else if (item.wait) {
      // NOTE [Failure propagation] (stream_worker.h): events always complete; this cannot hang.
      item.wait->wait();
    } else if (item.task && !failure_.failed()) {
      try {
        item.task();
      } catch (...) {
        failure_.fail(std::current_exception());
      }
    }
  }
}

}  // namespace fullshard::cpu
