// NOTE [Critical path] in simulator/step_breakdown.cc on hand-built programs with exact times.
#include <gtest/gtest.h>

#include "simulator/step_breakdown.h"
#include "tests/unit/engine_test_programs.h"

namespace fullshard::sim {
namespace {

using testing::S;

size_t index_of_marker(const Program& p) {
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].type == InstrType::kMarker) return i;
  return 0;
}

Program compute_comm_compute(int rank, double first) {
  ProgramBuilder b(rank);
  b.kernel(S::kDefault, "a", {}, {}, first).record(S::kDefault, 1).wait(S::kAllGather, 1);
  b.collective(S::kAllGather, "ag", CollectiveKind::kAllGather, 0, 1000).record(S::kAllGather, 2);
  b.wait(S::kDefault, 2).kernel(S::kDefault, "b", {}, {}, 1).sync(0).marker("step end");
  return b.build();
}

TEST(StepBreakdown, WalksThroughEventsAndStreams) {
  const Program p = compute_comm_compute(0, 2);
  const EngineResult r = simulate({p}, testing::one_group(1), testing::UnitCost());
  ASSERT_TRUE(r.ok());
  const StepBreakdown b =
      step_breakdown(p, r.ranks[0], -1, static_cast<long>(index_of_marker(p)), 0);
  EXPECT_EQ(b.end_s, 4);
  EXPECT_EQ(b.critical_path_s[static_cast<size_t>(PathKind::kCompute)], 3);
  EXPECT_EQ(b.critical_path_s[static_cast<size_t>(PathKind::kCommunication)], 1);
  EXPECT_EQ(b.compute_s, 3);
  EXPECT_EQ(b.comm_s, 1);
  EXPECT_EQ(b.exposed_comm_s, 1);
  EXPECT_EQ(b.stream_busy_s[static_cast<size_t>(S::kAllGather)], 1);
}

TEST(StepBreakdown, LatePeersAndLaunches) {
  // Rank 1 computes 3 s before the all-gather: rank 0 (1 s) waits 2 s for it.
  const std::vector<Program> ps = {compute_comm_compute(0, 1), compute_comm_compute(1, 3)};
  const EngineResult r = simulate(ps, testing::one_group(2), testing::UnitCost());
  ASSERT_TRUE(r.ok());
  const long m = static_cast<long>(index_of_marker(ps[0]));
  const StepBreakdown b = step_breakdown(ps[0], r.ranks[0], -1, m, 0);
  EXPECT_EQ(b.end_s, 5);
  EXPECT_EQ(b.critical_path_s[static_cast<size_t>(PathKind::kCompute)], 2);
  EXPECT_EQ(b.critical_path_s[static_cast<size_t>(PathKind::kCommunication)], 1);
  EXPECT_EQ(b.critical_path_s[static_cast<size_t>(PathKind::kPeerWait)], 2);
  // With a 1 s launch overhead the host issues kernel a at 1: the first second is launch.
  const EngineResult l = simulate({ps[0]}, testing::one_group(1), testing::UnitCost(1.0));
  const StepBreakdown c = step_breakdown(ps[0], l.ranks[0], -1, m, 1.0);
  double total = 0;
  for (double v : c.critical_path_s) total += v;
  EXPECT_EQ(total, c.end_s);
  EXPECT_GE(c.critical_path_s[static_cast<size_t>(PathKind::kLaunch)], 1);
  EXPECT_STREQ(path_kind_name(PathKind::kPeerWait), "peer_wait");
}

}  // namespace
}  // namespace fullshard::sim
