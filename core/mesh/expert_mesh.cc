#include "core/mesh/expert_mesh.h"

#include "core/common/error.h"

namespace fullshard {

ExpertGroups expert_groups(const ProcessGroup& shard, int global_rank, int ep) {
  const int w = shard.size();
  const int i = shard.index_of(global_rank);
  FULLSHARD_CHECK(ep >= 1 && w % ep == 0 && i >= 0,
                  "expert_groups: ep must divide the shard group");
  ExpertGroups g;
  g.ep.name = "ep";
  g.efsdp.name = "efsdp";
  for (int k = 0; k < ep; ++k)
    g.ep.ranks.push_back(shard.ranks[static_cast<size_t>(i / ep * ep + k)]);
  for (int k = i % ep; k < w; k += ep) g.efsdp.ranks.push_back(shard.ranks[static_cast<size_t>(k)]);
  return g;
}

}  // namespace fullshard
