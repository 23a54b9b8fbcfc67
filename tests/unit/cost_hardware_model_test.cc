// HardwareCostModel: the CostModel scenarios use (NCCL over the topology, roofline compute,
// collective loads from the profile).
#include <gtest/gtest.h>

#include "simulator/cost/hardware_cost_model.h"

namespace fullshard::sim {
namespace {

Instr collective(CollectiveKind k, uint64_t bytes) {
  Instr in;
  in.type = InstrType::kCollective;
  in.coll = k;
  in.coll_bytes = bytes;
  return in;
}

GroupInfo group(const std::string& name, int begin, int count, int stride = 1) {
  GroupInfo g{name, {}};
  for (int i = 0; i < count; ++i) g.ranks.push_back(begin + i * stride);
  return g;
}

TEST(HardwareCostModel, CollectivesFollowNcclOverTheTopology) {
  const HardwareProfile hw = load_hardware_profile("h100");
  const HardwareCostModel m(hw, ClusterLayout{2, 8});
  const nccl::NcclPlatform p = nccl::platform_from(hw);
  const GroupInfo node = group("shard", 0, 8), world = group("shard", 0, 16),
                  replicate = group("replicate", 3, 2, 8);
  const Instr ag = collective(CollectiveKind::kAllGather, 1 << 30);
  EXPECT_DOUBLE_EQ(
      m.collective_seconds(ag, node),
      nccl::choose(p, GroupTopology{8, 1, 8, 8}, nccl::Func::kAllGather, 1 << 30).time_us * 1e-6);
  EXPECT_DOUBLE_EQ(
      m.collective_seconds(ag, world),
      nccl::choose(p, GroupTopology{16, 2, 8, 8}, nccl::Func::kAllGather, 1 << 30).time_us * 1e-6);
  EXPECT_EQ(m.topology(replicate), (GroupTopology{2, 2, 1, 1}));
  const CollectiveChoice c = m.collective_choice(ag, node);
  EXPECT_EQ(c.algorithm, "ring");
  EXPECT_EQ(c.protocol, "simple");
  // Loads: intra-node collectives share NVLink and take 15% of compute; inter-node 2%.
  const CollectiveLoad intra = m.collective_load(ag, node), inter = m.collective_load(ag, world);
  EXPECT_EQ(intra.link, 0);
  EXPECT_DOUBLE_EQ(intra.compute_slowdown, 0.15);
  EXPECT_EQ(inter.link, 1);
  EXPECT_DOUBLE_EQ(inter.compute_slowdown, 0.02);
  // One rank: nothing moves.
  const GroupInfo one = group("shard", 5, 1);
  EXPECT_EQ(m.collective_seconds(ag, one), 0);
  EXPECT_EQ(m.collective_load(ag, one).link, -1);
  EXPECT_TRUE(m.collective_choice(ag, one).algorithm.empty());
  // A barrier is a 4-byte all-reduce.
  EXPECT_DOUBLE_EQ(
      m.collective_seconds(collective(CollectiveKind::kBarrier, 0), node),
      nccl::choose(p, GroupTopology{8, 1, 8, 8}, nccl::Func::kAllReduce, 4).time_us * 1e-6);
  EXPECT_DOUBLE_EQ(m.launch_overhead_seconds(), 5e-6);
}

TEST(HardwareCostModel, GroupCacheNoticesANewGroupAtTheSameAddress) {
  const HardwareCostModel m(load_hardware_profile("h100"), ClusterLayout{2, 8});
  GroupInfo g = group("shard", 0, 8);
  EXPECT_EQ(m.topology(g).nnodes, 1);
  g.ranks = {4, 5, 6, 7, 8, 9, 10, 11};  // same address, same size, other ranks
  EXPECT_EQ(m.topology(g).nnodes, 2);
}

TEST(HardwareCostModel, KernelsUseTheComputeModel) {
  const HardwareProfile hw = load_hardware_profile("h100");
  const HardwareCostModel m(hw, ClusterLayout{1, 8}, ComputeOptions{false, 1});
  Instr k;
  k.type = InstrType::kKernel;
  k.op = OpKind::kLinear;
  k.dtype = DType::kBFloat16;
  k.flops = 200e9;
  // No shape given: the measured table (0.83) at the sustained clock (0.85), plus the kernel gap.
  EXPECT_DOUBLE_EQ(m.kernel_seconds(k), 200e9 / (989.4e12 * 0.83 * 0.85) + hw.kernel_gap_s);
  k.place = KernelPlace::kHostToDevice;
  k.bytes = 2 * 27e9;
  EXPECT_DOUBLE_EQ(m.kernel_seconds(k), 1.0);  // pageable
}

}  // namespace
}  // namespace fullshard::sim
