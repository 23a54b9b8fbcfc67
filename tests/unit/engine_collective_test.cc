// Collective matching across group members: mismatches and hangs, structurally and in timing.
#include <gtest/gtest.h>

#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::all_messages;
using testing::one_group;
using testing::S;
using testing::UnitCost;

struct Coll {
  std::string name;
  CollectiveKind kind = CollectiveKind::kAllGather;
  uint64_t bytes = 4194304;
  DType dtype = DType::kBFloat16;
  ReduceOp op = ReduceOp::kSum;
};

std::vector<Coll> layers_ag(int n) {
  std::vector<Coll> out;
  for (int l = 0; l < n; ++l) out.push_back({"layers." + std::to_string(l) + " all_gather"});
  return out;
}

Program program(int rank, const std::vector<Coll>& colls, int step = 1) {
  ProgramBuilder b(rank);
  b.at_step(step);
  for (const Coll& c : colls) {
    b.collective(S::kAllGather, c.name, c.kind, 0, c.bytes, {}, {}, c.dtype, c.op);
    b.kernel(S::kDefault, c.name + " user", {}, {}, 1);
  }
  return b.build();
}

std::vector<Program> world(int n, const std::vector<Coll>& colls) {
  std::vector<Program> ps;
  for (int r = 0; r < n; ++r) ps.push_back(program(r, colls));
  return ps;
}

TEST(EngineCollectives, MatchingProgramsHaveNoProblems) {
  const auto ps = world(4, layers_ag(3));
  EXPECT_TRUE(check_collectives(ps, one_group(4), false).empty());
  const EngineResult r = simulate(ps, one_group(4), UnitCost());
  EXPECT_TRUE(r.ok()) << all_messages(r.problems);
}

TEST(EngineCollectives, RankThatStopsEarlyHangsTheOthers) {
  auto ps = world(4, layers_ag(4));
  ps[2] = program(2, layers_ag(2));  // rank 2 stops after layers.1
  const auto problems = check_collectives(ps, one_group(4), false);
  ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
  const Problem& p = problems[0];
  EXPECT_EQ(p.kind, ProblemKind::kCollectiveHang);
  EXPECT_EQ(p.message,
            "step 1: ranks 0,1,3 wait in all_gather 'layers.2 all_gather' (4194304 B bf16) #2 on "
            "group shard [0,1,2,3] but rank 2 never issues it (its program ends after "
            "'layers.1 all_gather user')");
  EXPECT_EQ(p.ranks, (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.op, "layers.2 all_gather");

  // The timing engine terminates, explains the hang once (same message as the check).
  const EngineResult r = simulate(ps, one_group(4), UnitCost());
  EXPECT_FALSE(r.completed);
  EXPECT_FALSE(r.ranks[0].completed);
  EXPECT_TRUE(r.ranks[2].completed);
  ASSERT_EQ(r.problems.size(), 1u) << all_messages(r.problems);
  EXPECT_EQ(r.problems[0].message, p.message);
  EXPECT_EQ(r.ranks[0].times[4].end, kNotRun);  // the hung all-gather never ran
  // Timing alone (no checks) reports the hang itself.
  EngineOptions no_checks;
  no_checks.checks = false;
  const EngineResult t = simulate(ps, one_group(4), UnitCost(), no_checks);
  ASSERT_EQ(t.problems.size(), 1u);
  EXPECT_EQ(t.problems[0].message, p.message);
}

TEST(EngineCollectives, SkippedCollectiveInTheMiddleIsAMismatch) {
  auto ps = world(4, layers_ag(4));
  auto skipped = layers_ag(4);
  skipped.erase(skipped.begin() + 2);
  ps[2] = program(2, skipped);
  const EngineResult r = simulate(ps, one_group(4), UnitCost());
  ASSERT_GE(r.problems.size(), 2u) << all_messages(r.problems);
  EXPECT_EQ(r.problems[0].kind, ProblemKind::kCollectiveMismatch);
  EXPECT_EQ(r.problems[0].message,
            "step 1: collective mismatch on group shard [0,1,2,3], collective #2: ranks 0,1,3 "
            "issued all_gather 'layers.2 all_gather' (4194304 B bf16), rank 2 issued all_gather "
            "'layers.3 all_gather' (4194304 B bf16)");
  EXPECT_EQ(r.problems[1].kind, ProblemKind::kCollectiveHang);
  EXPECT_CONTAINS(r.problems[1].message, ("ranks 0,1,3 wait in all_gather 'layers.3"));
  EXPECT_CONTAINS(r.problems[1].message, ("but rank 2 never issues it"));
  EXPECT_FALSE(r.completed);
}

TEST(EngineCollectives, WrongSize) {
  auto colls = layers_ag(3);
  auto ps = world(4, colls);
  colls[1].bytes = 2097152;
  ps[3] = program(3, colls);
  const auto problems = check_collectives(ps, one_group(4), false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].kind, ProblemKind::kCollectiveMismatch);
  EXPECT_CONTAINS(problems[0].message, ("step 1: collective mismatch on group shard "
                                        "[0,1,2,3], collective #1: ranks 0,1,2 issued "
                                        "all_gather 'layers.1 all_gather' (4194304 B bf16)"));
  EXPECT_CONTAINS(problems[0].message,
                  ("rank 3 issued all_gather 'layers.1 all_gather' (2097152 B bf16)"));
  // Timing still terminates (the members' costs differ; the longest wins).
  EXPECT_TRUE(simulate(ps, one_group(4), UnitCost()).completed);
}

TEST(EngineCollectives, SwappedOrderOfSameSizedCollectives) {
  auto colls = layers_ag(3);
  auto ps = world(2, colls);
  std::swap(colls[1], colls[2]);
  ps[1] = program(1, colls);
  const auto problems = check_collectives(ps, one_group(2), false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_CONTAINS(problems[0].message,
                  ("collective #1: rank 0 issued all_gather 'layers.1 all_gather' (4194304 "
                   "B bf16), rank 1 issued all_gather 'layers.2 all_gather'"));
}

TEST(EngineCollectives, KindDtypeAndReduceOpMismatches) {
  std::vector<Coll> rs = {{"layers.1 reduce_scatter", CollectiveKind::kReduceScatter}};
  std::vector<Coll> ag = {{"layers.2 all_gather"}};
  auto problems = check_collectives({program(0, ag), program(1, rs)}, one_group(2), false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_CONTAINS(problems[0].message,
                  ("rank 0 issued all_gather 'layers.2 all_gather' (4194304 B bf16), rank 1 "
                   "issued reduce_scatter 'layers.1 reduce_scatter' (4194304 B bf16 sum)"));

  auto fp32 = rs;
  fp32[0].dtype = DType::kFloat32;
  problems = check_collectives({program(0, rs), program(1, fp32)}, one_group(2), false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_CONTAINS(problems[0].message, ("(4194304 B fp32 sum)"));

  auto avg = rs;
  avg[0].op = ReduceOp::kAvg;
  problems = check_collectives({program(0, rs), program(1, avg)}, one_group(2), false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_CONTAINS(problems[0].message, ("(4194304 B bf16 avg)"));
}

TEST(EngineCollectives, CrossGroupDeadlockIsExplainedByTheTimingEngine) {
  // Each group's sequence matches, but rank 1 issues them in the other order on one stream.
  const std::vector<GroupInfo> groups = {{"shard", {0, 1}}, {"replicate", {0, 1}}};
  std::vector<Program> ps;
  for (int r = 0; r < 2; ++r) {
    ProgramBuilder b(r);
    const uint32_t first = r == 0 ? 0 : 1;
    b.collective(S::kAllGather, first == 0 ? "ag" : "ar",
                 first == 0 ? CollectiveKind::kAllGather : CollectiveKind::kAllReduce, first, 1000);
    b.collective(S::kAllGather, first == 0 ? "ar" : "ag",
                 first == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kAllGather, 1 - first,
                 1000);
    ps.push_back(b.build());
  }
  EXPECT_TRUE(check_collectives(ps, groups, false).empty());
  const EngineResult r = simulate(ps, groups, UnitCost());
  EXPECT_FALSE(r.completed);
  ASSERT_EQ(r.problems.size(), 2u) << all_messages(r.problems);
  EXPECT_EQ(r.problems[0].message,
            "step 0: rank 0 waits in all_gather 'ag' (1000 B bf16) #0 on group shard [0,1] but "
            "rank 1 is blocked: its all_gather stream is stuck in all_reduce 'ar' (1000 B bf16 "
            "sum) #0 on group replicate [0,1]");
  EXPECT_CONTAINS(r.problems[1].message, ("rank 1 waits in all_reduce 'ar'"));
}

TEST(EngineCollectives, HostBlockedInSynchronizeIsExplained) {
  // Each rank synchronizes on its first collective before issuing the second; they disagree
  // on which group goes first.
  const std::vector<GroupInfo> groups = {{"shard", {0, 1}}, {"replicate", {0, 1}}};
  std::vector<Program> ps;
  for (int r = 0; r < 2; ++r) {
    ProgramBuilder b(r);
    const uint32_t first = r == 0 ? 0 : 1;
    b.collective(S::kAllGather, first == 0 ? "x" : "y", CollectiveKind::kAllGather, first, 1000);
    b.record(S::kAllGather, 1).sync(1);
    b.collective(S::kAllGather, first == 0 ? "y" : "x", CollectiveKind::kAllGather, 1 - first,
                 1000);
    ps.push_back(b.build());
  }
  const EngineResult r = simulate(ps, groups, UnitCost());
  EXPECT_FALSE(r.completed);
  ASSERT_EQ(r.problems.size(), 2u) << all_messages(r.problems);
  EXPECT_EQ(r.problems[0].message,
            "step 0: rank 0 waits in all_gather 'x' (1000 B bf16) #0 on group shard [0,1] but "
            "rank 1 is blocked: its host waits in synchronize on event 1 (instruction #2)");
}

TEST(EngineCollectives, SymmetricModeComparesPresentMembersOnly) {
  const auto ps = world(2, layers_ag(2));
  EXPECT_TRUE(check_collectives({ps[0]}, one_group(8), true).empty());
  EXPECT_TRUE(check_collectives(ps, one_group(8), true).empty());
  auto bad = ps;
  bad[1] = program(1, layers_ag(1));
  EXPECT_EQ(check_collectives(bad, one_group(8), true).size(), 1u);
}

}  // namespace
}  // namespace fullshard::sim
