// Timing semantics of the event engine (NOTE [Timing semantics] in simulator/engine/engine.cc).
#include <gtest/gtest.h>

#include "core/common/error.h"
#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::one_group;
using testing::S;
using testing::UnitCost;

EngineResult run(const std::vector<Program>& programs, const std::vector<GroupInfo>& groups,
                 double launch_s = 0, bool symmetric = false) {
  EngineOptions o;
  o.symmetric = symmetric;
  return simulate(programs, groups, UnitCost(launch_s), o);
}

TEST(EngineTiming, StreamRunsItsQueueInOrderAndStreamsOverlap) {
  ProgramBuilder b;
  b.kernel(S::kDefault, "a", {}, {}, 2).kernel(S::kAllGather, "c", {}, {}, 1);
  b.kernel(S::kDefault, "b", {}, {}, 3);
  const EngineResult r = run({b.build()}, {});
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  const auto& t = r.ranks[0].times;
  EXPECT_EQ(t[0], (InstrTime{0, 0, 2}));
  EXPECT_EQ(t[1], (InstrTime{0, 0, 1}));
  EXPECT_EQ(t[2], (InstrTime{0, 2, 5}));
  EXPECT_EQ(r.makespan_s, 5);
  EXPECT_EQ(r.ranks[0].end_s, 5);
  EXPECT_EQ(r.ranks[0].compute_s, 5);
  EXPECT_EQ(r.ranks[0].busy_s[static_cast<int>(S::kAllGather)], 1);
}

TEST(EngineTiming, WaitEventDelaysTheWaitingStreamOnly) {
  ProgramBuilder b;
  b.kernel(S::kDefault, "a", {}, {}, 4).record(S::kDefault, 1);
  b.kernel(S::kAllGather, "early", {}, {}, 1);  // before the wait: not delayed
  b.wait(S::kAllGather, 1).kernel(S::kAllGather, "b", {}, {}, 1);
  b.wait(S::kReduceScatter, 99).kernel(S::kReduceScatter, "c", {}, {}, 1);  // never recorded
  const EngineResult r = run({b.build()}, {});
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  const auto& t = r.ranks[0].times;
  EXPECT_EQ(t[1].end, 4);  // the record completes with the work before it
  EXPECT_EQ(t[2], (InstrTime{0, 0, 1}));
  EXPECT_EQ(t[3], (InstrTime{0, 4, 4}));
  EXPECT_EQ(t[4], (InstrTime{0, 4, 5}));
  EXPECT_EQ(t[6], (InstrTime{0, 0, 1}));  // a wait on an unrecorded event is a no-op
}

TEST(EngineTiming, WaitRefersToTheLatestRecordIssuedBeforeIt) {
  ProgramBuilder b;
  b.record(S::kDefault, 1).kernel(S::kDefault, "a", {}, {}, 5);
  b.wait(S::kAllGather, 1).kernel(S::kAllGather, "b", {}, {}, 1);  // first record: t = 0
  b.record(S::kDefault, 1).wait(S::kReduceScatter, 1);             // re-recorded: t = 5
  b.kernel(S::kReduceScatter, "c", {}, {}, 1);
  const EngineResult r = run({b.build()}, {});
  EXPECT_EQ(r.ranks[0].times[3].start, 0);
  EXPECT_EQ(r.ranks[0].times[6].start, 5);
}

TEST(EngineTiming, SynchronizeBlocksTheHost) {
  ProgramBuilder b;
  b.kernel(S::kDefault, "a", {}, {}, 3).record(S::kDefault, 1).sync(1);
  b.alloc(5, S::kDefault, "after sync").kernel(S::kAllGather, "b", {}, {}, 1);
  const EngineResult r = run({b.build()}, {}, /*launch_s=*/0.5);
  const auto& t = r.ranks[0].times;
  EXPECT_EQ(t[0], (InstrTime{0.5, 0.5, 3.5}));
  EXPECT_EQ(t[1], (InstrTime{0.5, 3.5, 3.5}));
  EXPECT_EQ(t[2], (InstrTime{0.5, 0.5, 3.5}));  // the host waited 3 s
  EXPECT_EQ(t[3], (InstrTime{3.5, 3.5, 3.5}));
  EXPECT_EQ(t[4], (InstrTime{4.0, 4.0, 5.0}));
  EXPECT_EQ(r.makespan_s, 5);
}

TEST(EngineTiming, DeviceSynchronizeWaitsForEveryStream) {
  ProgramBuilder b;
  b.kernel(S::kDefault, "a", {}, {}, 2).kernel(S::kReduceScatter, "b", {}, {}, 7).sync(0);
  b.kernel(S::kDefault, "c", {}, {}, 1);
  const EngineResult r = run({b.build()}, {});
  EXPECT_EQ(r.ranks[0].times[2].end, 7);
  EXPECT_EQ(r.ranks[0].times[3], (InstrTime{7, 7, 8}));
}

TEST(EngineTiming, LaunchOverheadDelaysIssueNotTheStream) {
  ProgramBuilder b;
  for (int i = 0; i < 3; ++i) b.kernel(S::kDefault, "k", {}, {}, 0.25);
  const EngineResult r = run({b.build()}, {}, /*launch_s=*/1);
  const auto& t = r.ranks[0].times;
  EXPECT_EQ(t[0], (InstrTime{1, 1, 1.25}));
  EXPECT_EQ(t[1], (InstrTime{2, 2, 2.25}));  // launch-bound: the stream idles
  EXPECT_EQ(t[2], (InstrTime{3, 3, 3.25}));
}

// Collective on the compute stream after different amounts of compute per rank.
std::vector<Program> staggered(const std::vector<double>& compute_s) {
  std::vector<Program> ps;
  for (size_t r = 0; r < compute_s.size(); ++r) {
    ProgramBuilder b(static_cast<int>(r));
    b.kernel(S::kDefault, "fwd", {}, {}, compute_s[r]);
    b.collective(S::kDefault, "ag", CollectiveKind::kAllGather, 0, 2000);
    b.kernel(S::kDefault, "after", {}, {}, 1);
    ps.push_back(b.build());
  }
  return ps;
}

TEST(EngineTiming, CollectiveStartsAtTheLastArrivalTwoRanks) {
  const EngineResult r = run(staggered({1, 3}), one_group(2));
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  for (const RankTiming& rt : r.ranks) {
    EXPECT_EQ(rt.times[1].start, 3);
    EXPECT_EQ(rt.times[1].end, 5);
    EXPECT_EQ(rt.times[2].end, 6);
  }
  EXPECT_EQ(r.ranks[0].busy_s[0], 1 + 2 + 1);
}

TEST(EngineTiming, CollectiveStartsAtTheLastArrivalThreeRanks) {
  const EngineResult r = run(staggered({1, 4, 2}), one_group(3));
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  for (const RankTiming& rt : r.ranks) EXPECT_EQ(rt.times[1], (InstrTime{0, 4, 6}));
  EXPECT_EQ(r.makespan_s, 7);
}

TEST(EngineTiming, CollectivesMatchByHostOrderAcrossStreams) {
  // Rank 0 issues both on one stream; rank 1 puts the second on another stream that is free.
  std::vector<Program> ps;
  for (int r = 0; r < 2; ++r) {
    ProgramBuilder b(r);
    b.collective(S::kAllGather, "ag0", CollectiveKind::kAllGather, 0, 1000);
    b.collective(r == 0 ? S::kAllGather : S::kReduceScatter, "ag1", CollectiveKind::kAllGather, 0,
                 1000);
    ps.push_back(b.build());
  }
  const EngineResult r = run(ps, one_group(2));
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[1].times[1], (InstrTime{0, 1, 2}));  // waits for rank 0's stream
}

// Compute and communication overlap; exposed communication is comm time with compute idle.
TEST(EngineTiming, OverlapAndExposedCommunication) {
  ProgramBuilder b;
  b.kernel(S::kAllGatherCopyIn, "copy_in", {}, {}, 1);                      // [0,1] not comm
  b.collective(S::kAllGather, "ag0", CollectiveKind::kAllGather, 0, 2000);  // [0,2]
  b.record(S::kAllGather, 1);
  b.collective(S::kAllGather, "ag1", CollectiveKind::kAllGather, 0, 2000);  // [2,4]
  b.record(S::kAllGather, 2);
  b.wait(S::kDefault, 1).kernel(S::kDefault, "k0", {}, {}, 3);  // [2,5]
  b.wait(S::kDefault, 2).kernel(S::kDefault, "k1", {}, {}, 3);  // [5,8]
  b.record(S::kDefault, 3).wait(S::kReduceScatter, 3);
  b.collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 0, 1500);  // [8,9.5]
  b.kernel(S::kDefault, "k2", {}, {}, 0.5);                                        // [8,8.5]
  const EngineResult r = run({b.build()}, one_group(1));
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  const RankTiming& t = r.ranks[0];
  EXPECT_EQ(t.times[3], (InstrTime{0, 2, 4}));
  EXPECT_EQ(t.times[11], (InstrTime{0, 8, 9.5}));
  EXPECT_DOUBLE_EQ(t.compute_s, 6.5);
  // ag0 [0,2] fully exposed, ag1 [2,4] hidden by k0, rs [8,9.5] hidden for 0.5 s.
  EXPECT_DOUBLE_EQ(t.exposed_comm_s, 2 + 0 + 1);
  EXPECT_DOUBLE_EQ(t.busy_s[static_cast<int>(S::kAllGather)], 4);
  EXPECT_DOUBLE_EQ(r.makespan_s, 9.5);
}

TEST(EngineTiming, UncoveredSeconds) {
  EXPECT_EQ(uncovered_seconds({}, {{0, 1}}), 0);
  EXPECT_EQ(uncovered_seconds({{0, 4}}, {}), 4);
  EXPECT_EQ(uncovered_seconds({{0, 4}, {2, 6}}, {}), 6);  // union, not sum
  EXPECT_EQ(uncovered_seconds({{0, 10}}, {{1, 2}, {3, 4}, {9, 12}}), 7);
  EXPECT_EQ(uncovered_seconds({{0, 2}, {5, 7}}, {{1, 6}}), 2);
  EXPECT_EQ(uncovered_seconds({{1, 2}}, {{0, 3}}), 0);
}

TEST(EngineTiming, DeterministicBitIdentical) {
  testing::FsdpShape shape;
  shape.layers = 6;
  shape.steps = 2;
  shape.prefetch = true;
  std::vector<Program> ps;
  for (int r = 0; r < 4; ++r) {
    shape.compute_s = 1.0 + 0.37 * r;  // asymmetric ranks
    ps.push_back(testing::fsdp_program(r, shape));
  }
  const PlaceholderCostModel cost;
  const EngineResult a = simulate(ps, one_group(4), cost);
  const EngineResult b = simulate(ps, one_group(4), cost);
  ASSERT_TRUE(a.ok()) << testing::all_messages(a.problems);
  EXPECT_EQ(a.events_processed, b.events_processed);
  EXPECT_EQ(a.makespan_s, b.makespan_s);
  for (size_t r = 0; r < ps.size(); ++r) {
    EXPECT_EQ(a.ranks[r].times, b.ranks[r].times);
    EXPECT_EQ(a.ranks[r].exposed_comm_s, b.ranks[r].exposed_comm_s);
  }
}

TEST(EngineTiming, SymmetricModeEqualsFullModeOnIdenticalPrograms) {
  testing::FsdpShape shape;
  shape.layers = 4;
  shape.steps = 2;
  shape.prefetch = true;
  std::vector<Program> all;
  for (int r = 0; r < 8; ++r) all.push_back(testing::fsdp_program(r, shape));
  const PlaceholderCostModel cost;
  const EngineResult full = simulate(all, one_group(8), cost);
  EngineOptions sym;
  sym.symmetric = true;
  const EngineResult one = simulate({all[0]}, one_group(8), cost, sym);
  ASSERT_TRUE(full.ok()) << testing::all_messages(full.problems);
  ASSERT_TRUE(one.ok()) << testing::all_messages(one.problems);
  EXPECT_EQ(one.ranks[0].times, full.ranks[0].times);
  EXPECT_EQ(one.makespan_s, full.makespan_s);
  EXPECT_EQ(one.ranks[0].exposed_comm_s, full.ranks[0].exposed_comm_s);
  EXPECT_GT(one.ranks[0].exposed_comm_s, 0);
}

TEST(EngineTiming, FullModeRequiresEveryMember) {
  EXPECT_THROW(run(staggered({1}), one_group(2)), InternalError);
  EXPECT_NO_THROW(run(staggered({1}), one_group(2), 0, /*symmetric=*/true));
}

TEST(EngineTiming, PlaceholderCostModel) {
  PlaceholderCostOptions o;
  o.peak_flops = 100;
  o.memory_bandwidth = 10;
  o.collective_latency_s = 1;
  o.link_bandwidth = 4;
  const PlaceholderCostModel m(o);
  Instr k;
  k.flops = 200;
  k.bytes = 10;
  EXPECT_DOUBLE_EQ(m.kernel_seconds(k), 2);  // compute-bound
  k.bytes = 50;
  EXPECT_DOUBLE_EQ(m.kernel_seconds(k), 5);  // memory-bound
  Instr c;
  c.type = InstrType::kCollective;
  c.coll_bytes = 64;
  const GroupInfo g4{"shard", {0, 1, 2, 3}};
  EXPECT_DOUBLE_EQ(m.collective_seconds(c, g4), 1 + 64.0 * 3 / 4 / 4);
  c.coll = CollectiveKind::kAllReduce;
  EXPECT_DOUBLE_EQ(m.collective_seconds(c, g4), 2 * (1 + 64.0 * 3 / 4 / 4));
  EXPECT_DOUBLE_EQ(m.collective_seconds(c, GroupInfo{"solo", {0}}), 0);
  o.link_bandwidth = 0;
  EXPECT_THROW(PlaceholderCostModel{o}, InputError);
}

}  // namespace
}  // namespace fullshard::sim
