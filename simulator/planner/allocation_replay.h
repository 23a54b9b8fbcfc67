#pragma once
// Replays a recorded program's device allocations through a fresh caching allocator.
//
// NOTE [Allocation replay]: the host program asks for the same allocations in the same order
// whatever the allocator does (it never looks at addresses, and the simulator has no data), so
// the request sequence of one recording decides the memory of every allocator setting. The
// planner records each candidate program once with expandable segments and unlimited
// capacity -- with expandable segments every block is split down to its request rounded to
// 512 B, so Instr::size of an allocation *is* its rounded request -- and replays the requests
// with each allocator setting it evaluates (expandable on / off, the device's capacity,
// unlimited capacity for "how much would it need"). A replay gives the peak allocated and
// reserved bytes and the out-of-memory point exactly as simulate_scenario with that setting
// does (tests/unit/planner_replay_test.cc checks it on random scenarios).
#include <cstdint>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "simulator/engine/program.h"

namespace fullshard::planner {

// One device allocation or free of a recorded program, in host order.
struct AllocRequest {
  uint64_t buffer = 0;  // Instr::buffer
  uint64_t bytes = 0;   // alloc: the rounded request (0 for a free)
  uint32_t stream = 0;  // alloc: the pool's StreamId
  bool is_alloc = true;
};

// The device requests of `p` (host allocations, which the caching allocator never sees, are
// left out). `p` must have been recorded with expandable segments (see the NOTE).
std::vector<AllocRequest> device_requests(const sim::Program& p);

struct ReplayResult {
  bool out_of_memory = false;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  size_t failed_at = 0;  // index of the request that could not be served (when out_of_memory)
};

ReplayResult replay(const std::vector<AllocRequest>& requests, const AllocatorOptions& options);

}  // namespace fullshard::planner
