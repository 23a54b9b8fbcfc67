#include "simulator/host_memory.h"

#include <algorithm>
#include <map>

namespace fullshard::sim {

HostMemoryPerNode host_memory_per_node(const std::vector<RankReport>& classes, int gpus_per_node) {
  const int per_node = std::max(1, gpus_per_node);
  std::map<int, uint64_t> by_node;
  for (const RankReport& c : classes)
    for (int r : c.ranks) by_node[r / per_node] += c.peak_host_bytes;
  HostMemoryPerNode out;
  for (const auto& [node, bytes] : by_node)
    if (bytes > out.peak_bytes) out = HostMemoryPerNode{bytes, node};
  return out;
}

}  // namespace fullshard::sim
