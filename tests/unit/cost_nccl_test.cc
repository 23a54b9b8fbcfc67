// NCCL's cost model (simulator/cost/nccl_model.h) against values computed by hand from
// NVIDIA/nccl src/graph/tuning.cc's formulas: ring / tree / NVLS / NVLS-tree / PAT x LL / LL128 /
// Simple, several sizes and node counts, and the tuner's choice; plus monotonicity properties.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/nccl_model.h"

namespace fullshard::sim::nccl {
namespace {

// The h100-sxm-80gb profile's figures: 370.8 GB/s NVLink bus, 44 GB/s per NIC, 16 channels,
// NVLS at 0.85, Intel host.
NcclPlatform h100() { return platform_from(load_hardware_profile("h100-sxm-80gb")); }

double t(const NcclPlatform& p, const GroupTopology& g, Func f, Algo a, Proto pr, double bytes) {
  return algo_time_us(tune(p, g, f), p, g, f, a, pr, bytes);
}

const GroupTopology kNode8{8, 1, 8, 8};
const GroupTopology kTwoNodes16{16, 2, 8, 8};
const GroupTopology kReplicate16{16, 16, 1, 1};  // HSDP replicate group: one rank per node
const GroupTopology kFourNodesOneGpu{4, 4, 1, 1};

TEST(NcclModel, PlatformFromProfile) {
  const NcclPlatform p = h100();
  EXPECT_EQ(p.arch, 2);
  EXPECT_TRUE(p.nvlink);
  EXPECT_DOUBLE_EQ(p.intra_bus_gbs, 370.8);
  EXPECT_DOUBLE_EQ(p.net_bus_gbs, 44);
  EXPECT_EQ(p.nchannels, 16);
  EXPECT_TRUE(p.nvls);
  EXPECT_FALSE(p.amd_cpu);
  EXPECT_DOUBLE_EQ(p.net_overhead_us, 1);
  const NcclPlatform a = platform_from(load_hardware_profile("a100-80gb"));
  EXPECT_EQ(a.arch, 1);
  EXPECT_TRUE(a.amd_cpu);
  EXPECT_DOUBLE_EQ(a.net_overhead_us, 2);
  EXPECT_FALSE(a.nvls);
}

TEST(NcclModel, AllGatherInOneNode) {
  const NcclPlatform p = h100();
  const double B = 1e9;
  // Ring: bus 370.8, algbw = bus * n / (n-1); latency base + (n-1) * NVLink hop.
  EXPECT_NEAR(t(p, kNode8, Func::kAllGather, Algo::kRing, Proto::kSimple, B),
              8.4 + 7 * 3.4 + B / (1000 * 370.8 * 8 / 7), 1e-6);
  EXPECT_NEAR(t(p, kNode8, Func::kAllGather, Algo::kRing, Proto::kLL128, B),
              14.0 + 7 * 1.9 + B / (1000 * 370.8 * 0.92 * 8 / 7), 1e-6);
  EXPECT_NEAR(t(p, kNode8, Func::kAllGather, Algo::kRing, Proto::kLL, B),
              6.6 + 7 * 0.6 + B / (1000 * 141.0 * 8 / 7), 1e-6);
  // NVLS all-gather: per channel 370.8/16 * 0.85 * 15/16 * 7/8, no bus->alg conversion.
  const double nvls_bus = 16 * (370.8 / 16) * 0.85 * 15.0 / 16 * 7.0 / 8;
  EXPECT_NEAR(t(p, kNode8, Func::kAllGather, Algo::kNvls, Proto::kSimple, B),
              25 + B / (1000 * nvls_bus), 1e-6);
  // No tree, PAT (more than one GPU per node) or NVLS LL for all-gather.
  EXPECT_LT(t(p, kNode8, Func::kAllGather, Algo::kTree, Proto::kSimple, B), 0);
  EXPECT_LT(t(p, kNode8, Func::kAllGather, Algo::kPat, Proto::kSimple, B), 0);
  EXPECT_LT(t(p, kNode8, Func::kAllGather, Algo::kNvls, Proto::kLL, B), 0);
  // The tuner: Simple ring for big buffers, LL for tiny ones; reduce-scatter costs the same.
  Choice big = choose(p, kNode8, Func::kAllGather, B);
  EXPECT_EQ(big.algo, Algo::kRing);
  EXPECT_EQ(big.proto, Proto::kSimple);
  EXPECT_NEAR(big.time_us, 8.4 + 7 * 3.4 + B / (1000 * 370.8 * 8 / 7), 1e-6);
  Choice tiny = choose(p, kNode8, Func::kReduceScatter, 1e3);
  EXPECT_EQ(tiny.algo, Algo::kRing);
  EXPECT_EQ(tiny.proto, Proto::kLL);
  EXPECT_NEAR(tiny.time_us, 10.8 + 1e3 / (1000 * 141.0 * 8 / 7), 1e-9);
  EXPECT_DOUBLE_EQ(choose(p, kNode8, Func::kReduceScatter, B).time_us, big.time_us);
}

TEST(NcclModel, AllReduceInOneNode) {
  const NcclPlatform p = h100();
  const double B = 1e9;
  EXPECT_NEAR(t(p, kNode8, Func::kAllReduce, Algo::kRing, Proto::kSimple, B),
              8.4 + 14 * 3.4 + B / (1000 * 370.8 * 8 / 14), 1e-6);
  // Tree: bus * 0.92 (under 16 x 38.7), alg = bus / 2; latency base + 2 (ppn-1) NVLink hops.
  // 1e9 B is past the last tree-correction bucket (log2(1e9 / 64) = 23).
  EXPECT_NEAR(t(p, kNode8, Func::kAllReduce, Algo::kTree, Proto::kSimple, B),
              8.4 + 2 * 7 * 4.0 + B / (1000 * 370.8 * 0.92 / 2), 1e-6);
  // NVLS all-reduce: 2 x the efficiency-derated per-channel NVLink, under the 2x inter bound.
  const double nvls_bus = 16 * (370.8 / 16) * 0.85 * 15.0 / 16 * 2;
  EXPECT_NEAR(t(p, kNode8, Func::kAllReduce, Algo::kNvls, Proto::kSimple, B),
              25 + B / (1000 * nvls_bus * 8 / 14), 1e-6);
  EXPECT_EQ(choose(p, kNode8, Func::kAllReduce, B).algo, Algo::kNvls);
  // Tree LL at 1 KB: bus 341.136 / 3.8, / 2; correction factor 1.0 at log2(1000 >> 6) = 3.
  EXPECT_NEAR(t(p, kNode8, Func::kAllReduce, Algo::kTree, Proto::kLL, 1e3),
              6.8 + 2 * 7 * 0.6 + 1e3 / (1000 * 370.8 * 0.92 / 3.8 / 2), 1e-9);
  const Choice tiny = choose(p, kNode8, Func::kAllReduce, 1e3);
  EXPECT_EQ(tiny.algo, Algo::kRing);
  EXPECT_EQ(tiny.proto, Proto::kLL);
  EXPECT_NEAR(tiny.time_us, 6.6 + 14 * 0.6 + 1e3 / (1000 * 141.0 * 8 / 14), 1e-9);
  // Tree correction in the middle: 1 MB -> log2(15625) = 13 -> Simple factor 0.5.
  EXPECT_NEAR(t(p, kNode8, Func::kAllReduce, Algo::kTree, Proto::kSimple, 1e6),
              64.4 + 1e6 / (1000 * 370.8 * 0.92 / 2 * 0.5), 1e-9);
}

TEST(NcclModel, AllReduceOnTwoNodes) {
  const NcclPlatform p = h100();
  const double B = 1e9;
  // Ring over 2 x 8: bus = min(370.8, 8 NICs x 44) = 352; 2 of the 30 steps cross the network
  // (14 us each), the other 28 take max(NVLink 3.4, 3 x 1 us net overhead); x1.4 plateau.
  const double ring_lat = (8.4 + 28 * 3.4 + 2 * 14) * 1.4;
  EXPECT_NEAR(t(p, kTwoNodes16, Func::kAllReduce, Algo::kRing, Proto::kSimple, B),
              ring_lat + B / (1000 * 352.0 * 16 / 30), 1e-6);
  // Tree on 2 nodes: NCCL's search may double bwIntra over bwInter: min(370.8, 704) * 0.92 / 2.
  EXPECT_NEAR(t(p, kTwoNodes16, Func::kAllReduce, Algo::kTree, Proto::kSimple, B),
              8.4 + 2 * (7 * 4.0 + 1 * 14) + B / (1000 * 370.8 * 0.92 / 2), 1e-6);
  // NVLS tree: min(NVLink 23.175 x 0.85 x 15/16 x 2, NIC 352/16 x 2, cap 57.7) per channel.
  const double nvls_tree_bus = 16 * (370.8 / 16) * 0.85 * 15.0 / 16 * 2;
  EXPECT_NEAR(t(p, kTwoNodes16, Func::kAllReduce, Algo::kNvlsTree, Proto::kSimple, B),
              25 + 2 * 1 * 20.9 + B / (1000 * nvls_tree_bus * 16 / 30), 1e-6);
  EXPECT_LT(t(p, kTwoNodes16, Func::kAllReduce, Algo::kNvls, Proto::kSimple, B),
            0);  // needs CollNet
  EXPECT_EQ(choose(p, kTwoNodes16, Func::kAllReduce, B).algo, Algo::kNvlsTree);
  // Multi-node LL: Intel row, 2 nodes: 39 GB/s cap.
  EXPECT_NEAR(t(p, kTwoNodes16, Func::kAllReduce, Algo::kRing, Proto::kLL, 1e4),
              6.6 + 28 * 1.0 + 2 * 2.7 + 1e4 / (1000 * 39.0 * 16 / 30), 1e-9);
}

TEST(NcclModel, HsdpReplicateGroupOneRankPerNode) {
  const NcclPlatform p = h100();
  const double B = 1e9;
  // 16 nodes, 1 rank each: one NIC (44 GB/s); every ring step crosses the network with the
  // tree's NET latency (ppn == 1).
  EXPECT_NEAR(t(p, kReplicate16, Func::kAllReduce, Algo::kRing, Proto::kSimple, B),
              (8.4 + 30 * 14) * 1.4 + B / (1000 * 44.0 * 16 / 30), 1e-6);
  EXPECT_NEAR(t(p, kReplicate16, Func::kAllReduce, Algo::kTree, Proto::kSimple, B),
              8.4 + 2 * 4 * 14 + B / (1000 * 44.0 * 0.92 / 2), 1e-6);
  EXPECT_LT(t(p, kReplicate16, Func::kAllReduce, Algo::kNvlsTree, Proto::kSimple, B),
            0);  // 1 GPU per node
  EXPECT_EQ(choose(p, kReplicate16, Func::kAllReduce, B).algo, Algo::kRing);
  // At 1 MB the tree's LL128 wins: bus 44 x 0.92 x 120/128 / 2, corrected by 0.6 at bucket 13.
  const Choice mid = choose(p, kReplicate16, Func::kAllReduce, 1e6);
  EXPECT_EQ(mid.algo, Algo::kTree);
  EXPECT_EQ(mid.proto, Proto::kLL128);
  EXPECT_NEAR(mid.time_us, 14 + 2 * 4 * 8.5 + 1e6 / (1000 * 44.0 * 0.92 * 120 / 128 / 2 * 0.6),
              1e-6);
}

TEST(NcclModel, PatForOneGpuPerNode) {
  const NcclPlatform p = h100();
  // PAT all-gather: bus 44 x 0.75 (no conversion); latency 8 + log2(4) x 14/3.5 + 4 x 2.8.
  EXPECT_NEAR(t(p, kFourNodesOneGpu, Func::kAllGather, Algo::kPat, Proto::kSimple, 1e6),
              8 + 2 * 4.0 + 4 * 2.8 + 1e6 / (1000 * 33.0), 1e-9);
  EXPECT_NEAR(t(p, kFourNodesOneGpu, Func::kAllGather, Algo::kRing, Proto::kSimple, 1e6),
              8.4 + 3 * 14 + 1e6 / (1000 * 44.0 * 4 / 3), 1e-9);
  EXPECT_EQ(choose(p, kFourNodesOneGpu, Func::kAllGather, 1e6).algo, Algo::kPat);
  EXPECT_EQ(choose(p, kFourNodesOneGpu, Func::kAllGather, 1e9).algo, Algo::kRing);
  EXPECT_LT(t(p, kTwoNodes16, Func::kAllGather, Algo::kPat, Proto::kSimple, 1e6), 0);
  EXPECT_LT(t(p, kFourNodesOneGpu, Func::kAllReduce, Algo::kPat, Proto::kSimple, 1e6), 0);
}

TEST(NcclModel, AmdHostsAndPcieNodes) {
  NcclPlatform a = platform_from(load_hardware_profile("a100-80gb"));
  // Ampere one node: LL capped at 87.7 GB/s.
  EXPECT_NEAR(t(a, kNode8, Func::kAllGather, Algo::kRing, Proto::kLL, 1e6),
              6.6 + 7 * 0.6 + 1e6 / (1000 * 87.7 * 8 / 7), 1e-9);
  // AMD multi-node: 2 us net overhead, x3 for Simple, replaces the 3.4 us NVLink hop.
  const GroupTopology two{16, 2, 8, 8};
  const double bus = std::min(240.0, 8 * 22.0);
  EXPECT_NEAR(t(a, two, Func::kAllGather, Algo::kRing, Proto::kSimple, 1e9),
              8.4 + 14 * 6.0 + 1 * 14 + 1e9 / (1000 * bus * 16 / 15), 1e-6);
  EXPECT_LT(t(a, kNode8, Func::kAllReduce, Algo::kNvls, Proto::kSimple, 1e9),
            0);  // no NVLS on A100
  // PCIe node: PCI latency row, no LL128.
  a.nvlink = false;
  EXPECT_NEAR(t(a, kNode8, Func::kAllGather, Algo::kRing, Proto::kSimple, 1e6),
              8.4 + 7 * 5.7 + 1e6 / (1000 * 240.0 * 8 / 7), 1e-9);
  EXPECT_LT(t(a, kNode8, Func::kAllGather, Algo::kRing, Proto::kLL128, 1e6), 0);
}

TEST(NcclModel, BroadcastAndSingleRank) {
  const NcclPlatform p = h100();
  EXPECT_NEAR(t(p, kNode8, Func::kBroadcast, Algo::kRing, Proto::kSimple, 1e8),
              8.4 + 3.4 + 1e8 / (1000 * 370.8), 1e-9);
  EXPECT_LT(t(p, kNode8, Func::kBroadcast, Algo::kTree, Proto::kSimple, 1e8), 0);
  EXPECT_EQ(choose(p, GroupTopology{1, 1, 1, 1}, Func::kAllReduce, 1e9).time_us, 0);
  EXPECT_STREQ(algo_name(Algo::kNvlsTree), "nvls_tree");
  EXPECT_STREQ(proto_name(Proto::kLL128), "ll128");
  EXPECT_STREQ(func_name(Func::kReduceScatter), "reduce_scatter");
}

// ---------------------------------------------------------------- properties

GroupTopology gen_group() {
  const int gpn = *rc::gen::element(1, 2, 4, 8);
  const int nodes = *rc::gen::inRange(1, 65);
  const int per = *rc::gen::inRange(1, gpn + 1);
  return GroupTopology{per * nodes, nodes, per, per};
}

NcclPlatform gen_platform() {
  NcclPlatform p;
  p.compute_capability = *rc::gen::element(70, 80, 90, 100);
  p.arch = p.compute_capability >= 100  ? 3
           : p.compute_capability >= 90 ? 2
           : p.compute_capability >= 80 ? 1
                                        : 0;
  p.nvlink = *rc::gen::arbitrary<bool>();
  p.intra_bus_gbs = *rc::gen::inRange(10, 1000);
  p.net_bus_gbs = *rc::gen::inRange(1, 100);
  p.nchannels = *rc::gen::inRange(2, 33);
  p.nvls = p.nvlink && *rc::gen::arbitrary<bool>();
  p.nvls_efficiency = p.nvls ? 0.85 : 0;
  p.amd_cpu = *rc::gen::arbitrary<bool>();
  p.net_overhead_us = p.amd_cpu ? 2 : 1;
  return p;
}

// Every (algorithm, protocol) time grows with bytes except tree all-reduce (and NVLS-tree
// all-reduce on Blackwell), whose NCCL correction factor by size (treeCorrectionFactor) makes
// it non-monotone by design.
RC_GTEST_PROP(NcclModelProps, TimeGrowsWithBytes, ()) {
  const NcclPlatform p = gen_platform();
  const GroupTopology g = gen_group();
  const Func f =
      *rc::gen::element(Func::kBroadcast, Func::kAllGather, Func::kReduceScatter, Func::kAllReduce);
  const double b1 = *rc::gen::inRange(1, 1 << 30);
  const double b2 = b1 + *rc::gen::inRange(0, 1 << 30);
  const TuningTable table = tune(p, g, f);
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int pr = 0; pr < kNumProtos; ++pr) {
      if (static_cast<Algo>(a) == Algo::kTree && f == Func::kAllReduce) continue;
      if (static_cast<Algo>(a) == Algo::kNvlsTree && f == Func::kAllReduce &&
          p.compute_capability >= 100)
        continue;
      const double t1 =
          algo_time_us(table, p, g, f, static_cast<Algo>(a), static_cast<Proto>(pr), b1);
      const double t2 =
          algo_time_us(table, p, g, f, static_cast<Algo>(a), static_cast<Proto>(pr), b2);
      RC_ASSERT((t1 < 0) == (t2 < 0));
      if (t1 < 0) continue;  // not available for this group
      // Ring Simple all-reduce's latency steps up (x1.4) once chunks reach 64 B per channel.
      RC_LOG() << algo_name(static_cast<Algo>(a)) << "/" << proto_name(static_cast<Proto>(pr))
               << " " << t1 << " " << t2 << "\n";
      RC_ASSERT(t1 <= t2 * (1 + 1e-12));
    }
  }
  if (f != Func::kAllReduce)
    RC_ASSERT(choose(p, g, f, b1).time_us <= choose(p, g, f, b2).time_us * (1 + 1e-12));
}

RC_GTEST_PROP(NcclModelProps, MoreBandwidthIsNeverSlower, ()) {
  const NcclPlatform p = gen_platform();
  const GroupTopology g = gen_group();
  const Func f =
      *rc::gen::element(Func::kBroadcast, Func::kAllGather, Func::kReduceScatter, Func::kAllReduce);
  const double bytes = *rc::gen::inRange(1, 1 << 30);
  NcclPlatform faster = p;
  faster.intra_bus_gbs *= 1 + *rc::gen::inRange(0, 300) / 100.0;
  faster.net_bus_gbs *= 1 + *rc::gen::inRange(0, 300) / 100.0;
  RC_ASSERT(choose(faster, g, f, bytes).time_us <= choose(p, g, f, bytes).time_us * (1 + 1e-12));
  RC_ASSERT(choose(p, g, f, bytes).time_us >= 0);
}

}  // namespace
}  // namespace fullshard::sim::nccl
