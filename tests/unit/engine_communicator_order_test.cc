// NOTE [Communicator order] in simulator/engine/engine.cc: a process group's collectives run one
// at a time in issue order, whatever stream issued them (NCCL serialises a communicator's
// kernels); collectives of different groups still overlap.
#include <gtest/gtest.h>

#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::S;
using testing::UnitCost;

// Two communicators over the same ranks (as HSDP's or a separate reduce-scatter group would be).
std::vector<GroupInfo> two_groups(int world) {
  GroupInfo a{"shard", {}}, b{"other", {}};
  for (int r = 0; r < world; ++r) {
    a.ranks.push_back(r);
    b.ranks.push_back(r);
  }
  return {a, b};
}

TEST(EngineCommunicatorOrder, AllGatherQueuesBehindReduceScatterOfTheSameGroup) {
  // The host issues a 3 s reduce-scatter on the RS stream, then a 2 s all-gather prefetch on the
  // AG stream, both on group 0: the all-gather starts when the reduce-scatter ends.
  ProgramBuilder b;
  b.collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 0, 3000);
  b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 2000);
  const EngineResult r = simulate({b.build()}, two_groups(1), UnitCost());
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[0].times[0], (InstrTime{0, 0, 3}));
  EXPECT_EQ(r.ranks[0].times[1], (InstrTime{0, 3, 5}));
  EXPECT_EQ(r.makespan_s, 5);
}

TEST(EngineCommunicatorOrder, DifferentGroupsStillOverlap) {
  ProgramBuilder b;
  b.collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 0, 3000);
  b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 1, 2000);
  const EngineResult r = simulate({b.build()}, two_groups(1), UnitCost());
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[0].times[0], (InstrTime{0, 0, 3}));
  EXPECT_EQ(r.ranks[0].times[1], (InstrTime{0, 0, 2}));
  EXPECT_EQ(r.makespan_s, 3);
}

TEST(EngineCommunicatorOrder, IssueOrderNotStreamReadinessDecides) {
  // The all-gather is issued first but its stream waits 4 s for compute; the reduce-scatter,
  // issued after it and ready at once, still waits for it (NCCL enqueued them in that order).
  ProgramBuilder b;
  b.kernel(S::kDefault, "mm", {}, {}, 4).record(S::kDefault, 1);
  b.wait(S::kAllGather, 1).collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 1000);
  b.collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 0, 2000);
  const EngineResult r = simulate({b.build()}, two_groups(1), UnitCost());
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  EXPECT_EQ(r.ranks[0].times[3], (InstrTime{0, 4, 5}));  // ag
  EXPECT_EQ(r.ranks[0].times[4], (InstrTime{0, 5, 7}));  // rs behind it
}

TEST(EngineCommunicatorOrder, ALateMemberDelaysTheQueuedCollectiveOnEveryMember) {
  // Two ranks. Rank 1 computes 5 s before its reduce-scatter (rank 0: 1 s); both then issue an
  // all-gather on the AG stream that is ready at once. The reduce-scatter runs [5, 6] on both;
  // the all-gather, queued behind it on the communicator, runs [6, 8] on both.
  std::vector<Program> ps;
  for (int rank = 0; rank < 2; ++rank) {
    ProgramBuilder b(rank);
    b.kernel(S::kDefault, "bwd", {}, {}, rank == 0 ? 1 : 5).record(S::kDefault, 1);
    b.wait(S::kReduceScatter, 1)
        .collective(S::kReduceScatter, "rs", CollectiveKind::kReduceScatter, 0, 1000);
    b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 2000);
    ps.push_back(b.build());
  }
  const EngineResult r = simulate(ps, two_groups(2), UnitCost());
  ASSERT_TRUE(r.ok()) << testing::all_messages(r.problems);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.ranks[rank].times[3], (InstrTime{0, 5, 6})) << rank;
    EXPECT_EQ(r.ranks[rank].times[4], (InstrTime{0, 6, 8})) << rank;
  }
}

TEST(EngineCommunicatorOrder, AHangBehindAQueuedCollectiveIsExplained) {
  // Rank 1 issues an all-reduce on group 0 (default stream), then an all-gather on group 0 and
  // an all-reduce on group 1 (both on the AG stream). Rank 0 issues only the group-1 all-reduce.
  // Rank 1's first group-0 collective never completes (rank 0 never issues it), so its
  // all-gather is queued behind it and its group-1 all-reduce never arrives: the report says so.
  std::vector<Program> ps;
  {
    ProgramBuilder b(0);
    b.collective(S::kDefault, "ar1", CollectiveKind::kAllReduce, 1, 1000);
    ps.push_back(b.build());
  }
  {
    ProgramBuilder b(1);
    b.collective(S::kDefault, "ar0", CollectiveKind::kAllReduce, 0, 1000);
    b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 1000);
    b.collective(S::kAllGather, "ar1", CollectiveKind::kAllReduce, 1, 1000);
    ps.push_back(b.build());
  }
  EngineOptions o;
  o.checks = false;
  const EngineResult r = simulate(ps, two_groups(2), UnitCost(), o);
  EXPECT_FALSE(r.completed);
  EXPECT_EQ(r.ranks[1].times[1].start, kNotRun);
  EXPECT_CONTAINS(testing::all_messages(r.problems), "is queued behind");
}

}  // namespace
}  // namespace fullshard::sim
