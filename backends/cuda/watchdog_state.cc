#include "backends/cuda/watchdog_state.h"

#include "core/common/error.h"

namespace fullshard::cuda {
namespace {

long long ms_between(WatchdogClock::time_point a, WatchdogClock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace

uint64_t WatchdogState::on_enqueue(const std::string& group_key, const std::string& group_text,
                                   const gloo_backend::CallInfo& call,
                                   WatchdogClock::time_point now,
                                   std::chrono::milliseconds timeout) {
  FULLSHARD_CHECK(timeout.count() > 0, "collective timeout must be positive");
  const uint64_t id = ++next_id_;
  group_text_[group_key] = group_text;
  pending_.emplace(id, Pending{id, group_key, call, now, now + timeout});
  return id;
}

void WatchdogState::on_complete(uint64_t id) { pending_.erase(id); }

bool WatchdogState::aborted(const std::string& group_key) const {
  auto it = aborted_.find(group_key);
  return it != aborted_.end() && it->second;
}

const WatchdogState::Pending* WatchdogState::oldest_pending(const std::string& group_key) const {
  for (const auto& [id, p] : pending_)
    if (p.group_key == group_key) return &p;  // ids grow in issue order
  return nullptr;
}

std::string WatchdogState::who(const std::string& group_key) const {
  auto it = group_text_.find(group_key);
  const std::string group = it != group_text_.end() ? it->second : group_key;
  return "nccl: rank " + std::to_string(rank_) + " (group " + group + ")";
}

void WatchdogState::record(std::string message) {
  if (!error_) error_ = std::move(message);
}

void WatchdogState::drop_group(const std::string& group_key) {
  aborted_[group_key] = true;
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->second.group_key == group_key ? pending_.erase(it) : std::next(it);
}

bool WatchdogState::on_comm_error(const std::string& group_key, const std::string& reason,
                                  WatchdogClock::time_point now) {
  if (aborted(group_key)) return false;
  const Pending* p = oldest_pending(group_key);
  std::string m = who(group_key) + ": ";
  if (p != nullptr) {
    m += gloo_backend::describe(p->call) + " failed after " +
         std::to_string(ms_between(p->enqueued, now)) + " ms";
  } else {
    m += "the communicator failed with no collective in flight";
  }
  m += ": " + reason + "; the communicator was aborted";
  record(std::move(m));
  drop_group(group_key);
  return true;
}

std::vector<std::string> WatchdogState::on_tick(WatchdogClock::time_point now) {
  std::vector<std::string> expired;
  for (const auto& [id, p] : pending_) {
    if (now < p.deadline || aborted(p.group_key)) continue;
    bool listed = false;
    for (const auto& g : expired) listed = listed || g == p.group_key;
    if (listed) continue;
    const long long timeout_ms = ms_between(p.enqueued, p.deadline);
    record(who(p.group_key) + ": " + gloo_backend::describe(p.call) + " timed out after " +
           std::to_string(ms_between(p.enqueued, now)) + " ms (timeout " +
           std::to_string(timeout_ms) +
           " ms): a peer died, stalled, or issued a different collective; the communicator was "
           "aborted");
    expired.push_back(p.group_key);
  }
  for (const auto& g : expired) drop_group(g);
  return expired;
}

}  // namespace fullshard::cuda
