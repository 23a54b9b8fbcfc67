// The planner on a scenario with expert parallelism (NOTE [What expert parallelism needs] in
// core/scenario/scenario_ep.cc): ep stays the scenario's, and candidates it does not fit (a shard
// size ep does not divide, an int reshard_after_forward) are left out rather than simulated.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/planner/planner.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

TEST(PlannerExpertParallel, CandidatesKeepTheScenariosEp) {
  const json j = {{"model", "tiny-moe"},
                  {"training", {{"seq_len", 32}, {"steps", 2}}},
                  {"fsdp", {{"mesh", {{"shape", {4}}}}}},
                  {"expert_parallel", {{"degree", 2}}},
                  {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 4}}}};
  PlanOptions o;
  o.base = parse_scenario(j);
  o.space.gpus = 4;
  o.space.gpus_per_node = 4;
  o.space.n_layers = o.base.model.n_layers;
  o.space.micro_batches = {1};
  o.threads = 2;
  const PlanResult r = plan(o);
  ASSERT_FALSE(r.configs.empty());
  EXPECT_TRUE(r.best_fits());
  bool shard2 = false, shard4 = false;
  for (const ConfigResult& c : r.configs) {
    EXPECT_EQ(c.candidate.shard % 2, 0) << candidate_text(c.candidate);
    EXPECT_NE(c.candidate.reshard.kind, ReshardAfterForward::Kind::kInt)
        << candidate_text(c.candidate);
    shard2 |= c.candidate.shard == 2;
    shard4 |= c.candidate.shard == 4;
  }
  EXPECT_TRUE(shard2 && shard4);  // HSDP 2 x 2 and FSDP over 4 both stay
}

}  // namespace
}  // namespace fullshard::planner
