// NOTE [Rates] in simulator/engine/engine.cc: compute slowed beside collectives, collectives
// sharing a link class, per-rank speed factors; closed forms by hand, and determinism /
// symmetric == full with loads.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::S;

// Kernels take `flops` seconds, collectives coll_bytes / 1000; a collective on group "net"
// loads link 1, any other group link 0; both take `slowdown` of the compute beside them.
class LoadCost final : public CostModel {
 public:
  explicit LoadCost(double slowdown, bool share = true) : slowdown_(slowdown), share_(share) {}
  double kernel_seconds(const Instr& k) const override { return k.flops; }
  double collective_seconds(const Instr& c, const GroupInfo&) const override {
    return static_cast<double>(c.coll_bytes) / 1000.0;
  }
  double launch_overhead_seconds() const override { return 0; }
  CollectiveLoad collective_load(const Instr&, const GroupInfo& g) const override {
    return {share_ ? (g.name == "net" ? 1 : 0) : -1, slowdown_};
  }

 private:
  double slowdown_;
  bool share_;
};

// Group 0 "shard" and group 2 "other" are distinct communicators on link 0 (NOTE
// [Communicator order]: collectives of one group never run at once); group 1 "net" is link 1.
std::vector<GroupInfo> groups(int world) {
  GroupInfo shard{"shard", {}}, net{"net", {}}, other{"other", {}};
  for (int r = 0; r < world; ++r) {
    shard.ranks.push_back(r);
    net.ranks.push_back(r);
    other.ranks.push_back(r);
  }
  return {shard, net, other};
}

TEST(EngineRates, ComputeSlowsWhileACollectiveRuns) {
  // 4 s of compute beside a 2 s all-gather that takes half the SMs: 1 s of work done by t = 2,
  // the other 3 s at full speed: ends at 5.
  ProgramBuilder b;
  b.kernel(S::kDefault, "mm", {}, {}, 4)
      .collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 2000);
  const EngineResult r = simulate({b.build()}, groups(1), LoadCost(0.5));
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[0].times[0], (InstrTime{0, 0, 5}));
  EXPECT_EQ(r.ranks[0].times[1], (InstrTime{0, 0, 2}));
  // Without a load the two just overlap.
  ProgramBuilder c;
  c.kernel(S::kDefault, "mm", {}, {}, 4)
      .collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 2000);
  EXPECT_EQ(simulate({c.build()}, groups(1), testing::UnitCost()).ranks[0].times[0].end, 4);
}

TEST(EngineRates, CollectivesOnOneLinkShareIt) {
  // 2 s and 1 s on link 0 at once (two communicators): both at half rate until the short one
  // ends at t = 2 (1 s of the long one done), then the long one alone: ends at 3.
  ProgramBuilder b;
  b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 2000);
  b.collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 2, 1000);
  const EngineResult r = simulate({b.build()}, groups(1), LoadCost(0));
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[0].times[0].end, 3);
  EXPECT_EQ(r.ranks[0].times[1].end, 2);
  EXPECT_EQ(r.ranks[0].comm_s, 3);
  // On different link classes (group "net" is link 1) they do not share.
  ProgramBuilder c;
  c.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 2000);
  c.collective(S::kAllReduce, "ar", CollectiveKind::kAllReduce, 1, 1000);
  const EngineResult d = simulate({c.build()}, groups(1), LoadCost(0));
  EXPECT_EQ(d.ranks[0].times[0].end, 2);
  EXPECT_EQ(d.ranks[0].times[1].end, 1);
}

TEST(EngineRates, SlowedRankDelaysItsGroupsCollectives) {
  // Each rank: 2 s of compute, then a 1 s all-gather, then 1 s of compute. Rank 1 runs at 0.5:
  // its compute ends at 4, so the all-gather runs [4, 5] on both ranks and rank 0 idles 2 s.
  std::vector<Program> ps;
  for (int rank = 0; rank < 2; ++rank) {
    ProgramBuilder b(rank);
    b.kernel(S::kDefault, "a", {}, {}, 2).record(S::kDefault, 1).wait(S::kAllGather, 1);
    b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 1000).record(S::kAllGather, 2);
    b.wait(S::kDefault, 2).kernel(S::kDefault, "b", {}, {}, 1);
    ps.push_back(b.build());
  }
  EngineOptions o;
  o.speed = {1.0, 0.5};
  const EngineResult r = simulate(ps, groups(2), testing::UnitCost(), o);
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[0].times[0].end, 2);
  EXPECT_EQ(r.ranks[1].times[0].end, 4);
  for (const RankTiming& rt : r.ranks) EXPECT_EQ(rt.times[3], (InstrTime{0, 4, 5}));
  EXPECT_EQ(r.ranks[0].times[6].end, 6);
  EXPECT_EQ(r.ranks[1].times[6].end, 7);
  // The delay rank 0 sees is exactly the straggler's extra compute: 2 x (1/0.5 - 1) = 2 s.
  EngineOptions even;
  const EngineResult base = simulate(ps, groups(2), testing::UnitCost(), even);
  EXPECT_EQ(r.ranks[0].times[3].start - base.ranks[0].times[3].start, 2);
  EngineOptions bad;
  bad.speed = {1.0};
  EXPECT_THROW(simulate(ps, groups(2), testing::UnitCost(), bad), InternalError);
}

RC_GTEST_PROP(EngineRatesProps, DeterministicAndSymmetricEqualsFullWithLoads, ()) {
  testing::FsdpShape shape;
  shape.layers = *rc::gen::inRange(1, 5);
  shape.steps = *rc::gen::inRange(1, 3);
  shape.prefetch = *rc::gen::arbitrary<bool>();
  const int world = *rc::gen::inRange(2, 5);
  std::vector<Program> ps;
  for (int r = 0; r < world; ++r) ps.push_back(testing::fsdp_program(r, shape));
  const LoadCost cost(*rc::gen::element(0.0, 0.15, 0.5), *rc::gen::arbitrary<bool>());
  const EngineResult a = simulate(ps, testing::one_group(world), cost);
  const EngineResult b = simulate(ps, testing::one_group(world), cost);
  EngineOptions sym;
  sym.symmetric = true;
  const EngineResult one = simulate({ps[0]}, testing::one_group(world), cost, sym);
  RC_ASSERT(a.ok());
  RC_ASSERT(a.events_processed == b.events_processed);
  for (int r = 0; r < world; ++r) RC_ASSERT(a.ranks[r].times == b.ranks[r].times);
  RC_ASSERT(one.ranks[0].times == a.ranks[0].times);
  RC_ASSERT(one.makespan_s == a.makespan_s);
}

}  // namespace
}  // namespace fullshard::sim
