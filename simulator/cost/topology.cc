#include "simulator/cost/topology.h"

#include <algorithm>
#include <string>

#include "core/common/error.h"

namespace fullshard::sim {

GroupTopology group_topology(const std::vector<int>& ranks, const ClusterLayout& layout) {
  FULLSHARD_CHECK(layout.nodes >= 1 && layout.gpus_per_node >= 1, "empty cluster layout");
  std::vector<int> per_node(static_cast<size_t>(layout.nodes), 0);
  std::vector<bool> seen(static_cast<size_t>(layout.world()), false);
  for (int r : ranks) {
    FULLSHARD_CHECK(
        r >= 0 && r < layout.world(),
        "rank " + std::to_string(r) + " outside a world of " + std::to_string(layout.world()));
    FULLSHARD_CHECK(!seen[static_cast<size_t>(r)],
                    "rank " + std::to_string(r) + " twice in a group");
    seen[static_cast<size_t>(r)] = true;
    ++per_node[static_cast<size_t>(layout.node_of(r))];
  }
  GroupTopology t;
  t.nranks = static_cast<int>(ranks.size());
  for (int n : per_node) {
    if (n == 0) continue;
    ++t.nnodes;
    t.min_ppn = t.min_ppn == 0 ? n : std::min(t.min_ppn, n);
    t.max_ppn = std::max(t.max_ppn, n);
  }
  return t;
}

}  // namespace fullshard::sim
