// The all-to-all's cost (NOTE [All-to-all cost] in simulator/cost/nccl_model.h): NCCL's grouped
// send / recv per peer, each chunk over the link between the two ranks, values by hand from the
// h100-sxm-80gb profile (370.8 GB/s NVLink bus, 44 GB/s per NIC; Ring / Simple latencies 8.4 us
// base, 3.4 us NVLink hop, 14 us network hop); and how the HardwareCostModel reads an Instr.
#include <gtest/gtest.h>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/hardware_cost_model.h"
#include "simulator/cost/nccl_model.h"

namespace fullshard::sim {
namespace {

nccl::NcclPlatform h100() { return nccl::platform_from(load_hardware_profile("h100-sxm-80gb")); }

TEST(AllToAllCost, OneNodeMovesEveryPeerChunkOverNvlink) {
  // 8 ranks in one node, 7 MB to the others (1 MB per peer), 7 MB back.
  const GroupTopology g{8, 1, 8, 8};
  const double t = nccl::all_to_all_time_us(h100(), g, 7e6, 7e6);
  EXPECT_NEAR(t, 8.4 + 3.4 + 7e6 / (1000.0 * 370.8), 1e-9);
}

TEST(AllToAllCost, AcrossNodesTheNicBounds) {
  // 16 ranks on 2 nodes: per peer 1 MB; 7 peers in the node, 8 across.
  const GroupTopology g{16, 2, 8, 8};
  const double t = nccl::all_to_all_time_us(h100(), g, 15e6, 15e6);
  const double intra = 7e6 / (1000.0 * 370.8), inter = 8e6 / (1000.0 * 44);
  EXPECT_NEAR(t, 8.4 + 14.0 + std::max(intra, inter), 1e-9);
  EXPECT_GT(t, nccl::all_to_all_time_us(h100(), GroupTopology{16, 1, 16, 16}, 15e6, 15e6));
}

TEST(AllToAllCost, TheLargerDirectionAndNothingForOneRank) {
  const GroupTopology g{4, 1, 4, 4};
  EXPECT_DOUBLE_EQ(nccl::all_to_all_time_us(h100(), g, 3e6, 6e6),
                   nccl::all_to_all_time_us(h100(), g, 6e6, 1e6));
  EXPECT_LT(nccl::all_to_all_time_us(h100(), g, 3e6, 3e6),
            nccl::all_to_all_time_us(h100(), g, 6e6, 6e6));
  EXPECT_EQ(nccl::all_to_all_time_us(h100(), GroupTopology{1, 1, 1, 1}, 1e6, 1e6), 0);
}

TEST(AllToAllCost, HardwareCostModelReadsTheInstrsDims) {
  const HardwareProfile hw = load_hardware_profile("h100-sxm-80gb");
  const HardwareCostModel m(hw, ClusterLayout{2, 8});
  Instr in;
  in.type = InstrType::kCollective;
  in.coll = CollectiveKind::kAllToAll;
  in.dims = {15'000'000, 15'000'000, 0};
  GroupInfo g{"ep", {}};
  for (int r = 0; r < 16; ++r) g.ranks.push_back(r);
  EXPECT_NEAR(m.collective_seconds(in, g),
              nccl::all_to_all_time_us(h100(), GroupTopology{16, 2, 8, 8}, 15e6, 15e6) * 1e-6,
              1e-15);
  EXPECT_EQ(m.collective_choice(in, g).algorithm, "p2p");
  EXPECT_EQ(m.collective_load(in, g).link, 1);
}

}  // namespace
}  // namespace fullshard::sim
