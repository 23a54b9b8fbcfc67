#pragma once
// A real backend's events by EventId (core/runtime/stream.h): what record_event returns and
// wait_event / synchronize look up. `Event` is the backend's handle (a CPU stream marker, a
// cudaEvent_t). Used from the host program's thread only.
//
// NOTE [Pruned events]: after a host synchronize, events whose work completed are dropped (they
// can no longer delay anyone); a later wait_event on a dropped id finds nothing and waits for
// nothing, which is right because its work is done. Ids are never reused.
#include <unordered_map>
#include <utility>

#include "core/runtime/stream.h"

namespace fullshard::backends {

template <class Event>
class EventTable {
 public:
  EventId add(Event e) {
    const EventId id = ++last_;
    map_.emplace(id, std::move(e));
    return id;
  }
  // The event, or null when it was pruned (or never recorded: id 0).
  const Event* find(EventId id) const {
    auto it = map_.find(id);
    return it == map_.end() ? nullptr : &it->second;
  }
  // Drops every event for which `completed(id, event)` returns true (it may release the
  // handle; an exception leaves that event and the ones not yet visited in place).
  template <class Completed>
  void prune(Completed&& completed) {
    for (auto it = map_.begin(); it != map_.end();)
      it = completed(it->first, it->second) ? map_.erase(it) : std::next(it);
  }
  // Drops every event, calling `release(event)` on each.
  template <class Release>
  void clear(Release&& release) {
    for (auto& [id, e] : map_) release(e);
    map_.clear();
  }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<EventId, Event> map_;
  EventId last_ = 0;
};

}  // namespace fullshard::backends
