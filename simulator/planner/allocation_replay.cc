#include "simulator/planner/allocation_replay.h"

#include <algorithm>
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
  // A recording numbers its buffers from 1 up, so the live blocks are a table by buffer id
  // (ids past it, never expected, go to a map).
  uint64_t max_id = 0;
  for (const AllocRequest& q : requests) max_id = std::max(max_id, q.buffer);
  const uint64_t table_size = std::min<uint64_t>(max_id + 1, 2 * requests.size() + 1024);
  std::vector<Block> table(table_size);
  std::vector<uint8_t> in_table(table_size, 0);
  std::unordered_map<uint64_t, Block> overflow;
  ReplayResult r;
  for (size_t i = 0; i < requests.size(); ++i) {
    const AllocRequest& q = requests[i];
    if (!q.is_alloc) {
      if (q.buffer < table_size) {
        FULLSHARD_CHECK(in_table[q.buffer], "replay: free of a buffer that is not live");
        alloc.free(table[q.buffer]);
        in_table[q.buffer] = 0;
      } else {
        auto it = overflow.find(q.buffer);
        FULLSHARD_CHECK(it != overflow.end(), "replay: free of a buffer that is not live");
        alloc.free(it->second);
        overflow.erase(it);
      }
      continue;
    }
    auto b = alloc.malloc(q.bytes, q.stream);
    if (!b) {
      r.out_of_memory = true;
      r.failed_at = i;
      break;
    }
    if (q.buffer < table_size) {
      table[q.buffer] = *b;
      in_table[q.buffer] = 1;
    } else {
      overflow.emplace(q.buffer, *b);
    }
    const AllocatorStats& st = alloc.stats();
    if (st.allocated_bytes > r.peak_allocated_bytes) r.peak_allocated_bytes = st.allocated_bytes;
    if (st.reserved_bytes > r.peak_reserved_bytes) r.peak_reserved_bytes = st.reserved_bytes;
  }
  return r;
}

}  // namespace fullshard::planner
