// An uneven batch (training.rank_batch): the rank with more sequences is a straggler, and
// because FSDP's collectives wait for every member, everyone's step gets as long as its.
#include <gtest/gtest.h>

#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;

TEST(UnevenBatch, TheBiggerBatchDelaysEveryRank) {
  TinyOptions o;
  o.mesh = {4};
  o.batch = 1;
  o.seq = 64;
  // The cpu profile (100 GFLOP/s per rank): the tiny model is compute-bound there, not
  // launch-bound as it is on an H100.
  o.hardware_extra = {{"gpus_per_node", 4}};
  nlohmann::json even = tiny_scenario_json(o);
  nlohmann::json uneven = even;
  uneven["training"]["rank_batch"] = {{{"rank", 3}, {"batch", 16}}};
  const sim::SimulationReport a = sim::simulate_scenario(parse_scenario(even));
  const sim::SimulationReport b = sim::simulate_scenario(parse_scenario(uneven));
  ASSERT_TRUE(a.ok() && b.ok()) << problems_text(a) << problems_text(b);
  EXPECT_FALSE(a.simulated_all_ranks);
  EXPECT_TRUE(b.simulated_all_ranks);
  EXPECT_GT(b.step_time_s, 1.5 * a.step_time_s);
  std::map<int, const sim::RankClassReport*> by_rank;
  for (const auto& c : b.classes)
    for (int r : c.ranks) by_rank[r] = &c;
  ASSERT_EQ(by_rank.size(), 4u);
  // Rank 0 computes a sixteenth of rank 3's work, yet finishes no earlier than
  // rank 3's last collective lets it: within 10% of the straggler's end.
  EXPECT_GT(by_rank[0]->end_time_s, 0.9 * by_rank[3]->end_time_s);
  EXPECT_GT(by_rank[3]->peak_allocated_bytes, by_rank[0]->peak_allocated_bytes);
  // Tokens per GPU count the mean batch: (1 + 1 + 1 + 16) / 4 sequences.
  EXPECT_NEAR(b.tokens_per_s_per_gpu * b.step_time_s, 19.0 / 4 * 64, 1e-6 * 19 * 64);
}
