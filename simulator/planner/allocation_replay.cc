#include "simulator/planner/allocation_replay.h"

#include <unordered_map>

#include "core/common/error.h"
#include "core/runtime/stream.h"

namespace fullshard::planner {

std::vector<AllocRequest> device_requests(const sim::Program& p) {
  std::vector<AllocRequest> out;
  out.reserve(p.instrs.size() / 2);
  for (const sim::Instr& in : p.instrs) {
    if (in.on_host) continue;
    if (in.type == sim::InstrType::kAlloc)
      out.push_back({in.buffer, in.size, stream_id(in.stream), true});
    else if (in.type == sim::InstrType::kFree)
      out.push_back({in.buffer, 0, 0, false});
  }
  return out;
}

ReplayResult replay(const std::vector<AllocRequest>& requests, const AllocatorOptions& options) {
  CachingAllocator alloc(options);
  std::unordered_map<uint64_t, Block> live;
  live.reserve(4096);
  ReplayResult r;
  for (size_t i = 0; i < requests.size(); ++i) {
    const AllocRequest& q = requests[i];
    if (!q.is_alloc) {
      auto it = live.find(q.buffer);
      FULLSHARD_CHECK(it != live.end(), "replay: free of a buffer that is not live");
      alloc.free(it->second);
      live.erase(it);
      continue;
    }
    auto b = alloc.malloc(q.bytes, q.stream);
    if (!b) {
      r.out_of_memory = true;
      r.failed_at = i;
      break;
    }
    live.emplace(q.buffer, *b);
    const AllocatorStats& st = alloc.stats();
    if (st.allocated_bytes > r.peak_allocated_bytes) r.peak_allocated_bytes = st.allocated_bytes;
    if (st.reserved_bytes > r.peak_reserved_bytes) r.peak_reserved_bytes = st.reserved_bytes;
  }
  return r;
}

}  // namespace fullshard::planner
