// Async TP's collective-matmul pipelines (simulator/cost/collective_matmul.h): hand-played
// schedules and the bounds every schedule keeps.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "simulator/cost/collective_matmul.h"

namespace fullshard::sim {
namespace {

// tp 2, products slower than the pull: the own shard's products (after the copy into the
// symmetric buffer) hide the one pull; only the copy-in is exposed.
TEST(CollectiveMatmul, AllGatherHidesAPullBehindTheOwnProducts) {
  CollectiveMatmulCosts c;
  c.parts = 2;
  c.local_copy_s = 1;
  c.chunk_matmul_s = 10;
  c.chunk_copy_s = 3;
  const CollectiveMatmulTimes t = all_gather_matmul_times(c);
  EXPECT_DOUBLE_EQ(t.total_s, 21);  // 1 + 10 + 10
  EXPECT_DOUBLE_EQ(t.compute_s, 20);
  EXPECT_DOUBLE_EQ(t.comm_s, 4);  // copy-in + one pull
}

// tp 4, pulls slower than the products: the copy engine bounds it, 3 pulls + the last chunk.
TEST(CollectiveMatmul, AllGatherBoundByThePulls) {
  CollectiveMatmulCosts c;
  c.parts = 4;
  c.chunk_matmul_s = 1;
  c.chunk_copy_s = 10;
  EXPECT_DOUBLE_EQ(all_gather_matmul_times(c).total_s, 31);
}

// tp 2 reduce-scatter: the peer's partial (backend stream) then its pull, while the own
// rows' partial runs; then the sum.
TEST(CollectiveMatmul, ReduceScatterOverlapsThePullWithTheOwnRows) {
  CollectiveMatmulCosts c;
  c.parts = 2;
  c.chunk_matmul_s = 10;
  c.chunk_copy_s = 4;
  c.reduce_s = 2;
  const CollectiveMatmulTimes t = matmul_reduce_scatter_times(c);
  EXPECT_DOUBLE_EQ(t.total_s, 22);  // 10 (peer rows) + 10 (own rows, the pull beside it) + 2
  EXPECT_DOUBLE_EQ(t.compute_s, 22);
  c.chunk_copy_s = 15;  // now the pull ends after the own rows: 10 + 15 + 2
  EXPECT_DOUBLE_EQ(matmul_reduce_scatter_times(c).total_s, 27);
}

// Any costs: the pipeline never beats its products alone nor its copy engine alone, never
// loses to running everything one after another, and slower pulls never make it faster.
RC_GTEST_PROP(CollectiveMatmul, ScheduleBounds, ()) {
  CollectiveMatmulCosts c;
  c.parts = *rc::gen::inRange(2, 9);
  c.chunk_matmul_s = *rc::gen::inRange(1, 1000) * 1e-6;
  c.chunk_copy_s = *rc::gen::inRange(1, 1000) * 1e-6;
  c.local_copy_s = *rc::gen::inRange(0, 100) * 1e-6;
  c.barrier_s = *rc::gen::inRange(0, 10) * 1e-6;
  c.reduce_s = *rc::gen::inRange(0, 100) * 1e-6;
  const bool gather = *rc::gen::arbitrary<bool>();
  auto times = [&](const CollectiveMatmulCosts& x) {
    return gather ? all_gather_matmul_times(x) : matmul_reduce_scatter_times(x);
  };
  const CollectiveMatmulTimes t = times(c);
  const double eps = 1e-12;
  RC_ASSERT(t.total_s + eps >= t.compute_s);
  RC_ASSERT(t.total_s + eps >= (c.parts - 1) * c.chunk_copy_s);
  RC_ASSERT(t.total_s <= t.compute_s + t.comm_s + eps);
  CollectiveMatmulCosts slower = c;
  slower.chunk_copy_s *= 2;
  RC_ASSERT(times(slower).total_s + eps >= t.total_s);
}

}  // namespace
}  // namespace fullshard::sim
