// Topology: a process group's ranks -> (nRanks, nNodes, ranks per node) from the cluster
// layout, for the meshes FSDP2 builds (NOTE [Rank placement] in simulator/cost/topology.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <numeric>

#include "core/common/error.h"
#include "simulator/cost/topology.h"

namespace fullshard::sim {
namespace {

std::vector<int> iota(int begin, int count, int stride = 1) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(begin + i * stride);
  return v;
}

TEST(Topology, FsdpInOneNode) {
  const GroupTopology t = group_topology(iota(0, 8), {1, 8});
  EXPECT_EQ(t, (GroupTopology{8, 1, 8, 8}));
  EXPECT_TRUE(t.single_node());
  EXPECT_DOUBLE_EQ(t.ppn(), 8);
}

TEST(Topology, FsdpOver128GpusOn16Nodes) {
  const GroupTopology t = group_topology(iota(0, 128), {16, 8});
  EXPECT_EQ(t, (GroupTopology{128, 16, 8, 8}));
  EXPECT_FALSE(t.single_node());
}

TEST(Topology, HsdpShardDimInsideANode) {
  // Mesh [16, 8] on 16 nodes of 8: shard groups are 8 consecutive ranks (one node), replicate
  // groups take one rank per node.
  const ClusterLayout layout{16, 8};
  for (int g = 0; g < 16; ++g)
    EXPECT_EQ(group_topology(iota(8 * g, 8), layout), (GroupTopology{8, 1, 8, 8}));
  for (int s = 0; s < 8; ++s) {
    const GroupTopology r = group_topology(iota(s, 16, 8), layout);
    EXPECT_EQ(r, (GroupTopology{16, 16, 1, 1}));
    EXPECT_DOUBLE_EQ(r.ppn(), 1);
  }
}

TEST(Topology, ShardDimSpanningNodesAndUnevenGroups) {
  // Mesh [2, 8] on nodes of 4 GPUs: a shard group spans 2 nodes, 4 ranks each.
  EXPECT_EQ(group_topology(iota(8, 8), {4, 4}), (GroupTopology{8, 2, 4, 4}));
  // 12 ranks over nodes of 8: 8 + 4.
  const GroupTopology u = group_topology(iota(0, 12), {2, 8});
  EXPECT_EQ(u, (GroupTopology{12, 2, 4, 8}));
  EXPECT_DOUBLE_EQ(u.ppn(), 6);
  EXPECT_EQ(group_topology({}, {1, 8}), (GroupTopology{0, 0, 0, 0}));
}

TEST(Topology, RejectsRanksOutsideTheLayout) {
  EXPECT_THROW(group_topology({0, 8}, {1, 8}), InternalError);
  EXPECT_THROW(group_topology({1, 1}, {1, 8}), InternalError);
}

RC_GTEST_PROP(Topology, CountsAddUp, ()) {
  const int gpn = *rc::gen::inRange(1, 9);
  const int nodes = *rc::gen::inRange(1, 9);
  const ClusterLayout layout{nodes, gpn};
  std::vector<int> all(static_cast<size_t>(layout.world()));
  std::iota(all.begin(), all.end(), 0);
  const auto mask = *rc::gen::container<std::vector<bool>>(all.size(), rc::gen::arbitrary<bool>());
  std::vector<int> ranks;
  for (size_t i = 0; i < all.size(); ++i)
    if (mask[i]) ranks.push_back(all[i]);
  const GroupTopology t = group_topology(ranks, layout);
  RC_ASSERT(t.nranks == static_cast<int>(ranks.size()));
  RC_ASSERT(t.nnodes <= std::min(t.nranks, nodes));
  if (t.nranks > 0) {
    RC_ASSERT(t.min_ppn >= 1);
    RC_ASSERT(t.min_ppn <= t.ppn() && t.ppn() <= t.max_ppn);
    RC_ASSERT(t.max_ppn <= gpn);
    RC_ASSERT(t.min_ppn * t.nnodes <= t.nranks && t.nranks <= t.max_ppn * t.nnodes);
  }
}

}  // namespace
}  // namespace fullshard::sim
