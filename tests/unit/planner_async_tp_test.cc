// A scenario's tensor_parallel.async stays for the planner's candidates that can run it: a tp
// dim, and no op-level selective checkpointing (NOTE [What async TP needs] in scenario_checks.cc),
// in the simulated candidate and in the scenario --write-scenario writes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/planner/candidate_json.h"
#include "simulator/planner/search_space.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

TEST(PlannerAsyncTp, CandidatesKeepAsyncWhereItRuns) {
  const json base = {
      {"name", "b"},
      {"model", {{"name", "tiny-llama"}, {"implementation", {{"compile", true}}}}},
      {"training", {{"seq_len", 64}, {"steps", 2}}},
      {"fsdp", {{"mesh", {{"shape", {2, 2}}, {"dim_names", {"dp_shard", "tp"}}}}}},
      {"tensor_parallel", {{"async", true}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 4}}}};
  const Scenario s = parse_scenario(base);
  Candidate c;
  c.shard = 2;
  c.tp = 2;
  c.precision = Precision::kBf16;
  c.ac.mode = RecomputeMode::kNone;
  EXPECT_TRUE(candidate_scenario(s, c).tensor_parallel.async);
  json w = candidate_scenario_json(base, c, "w", "");
  EXPECT_TRUE(w["tensor_parallel"]["async"].get<bool>());
  EXPECT_TRUE(parse_scenario(w).tensor_parallel.async);  // the written scenario loads
  c.ac.mode = RecomputeMode::kSelectiveOp;
  EXPECT_FALSE(candidate_scenario(s, c).tensor_parallel.async);
  w = candidate_scenario_json(base, c, "w", "");
  EXPECT_FALSE(w["tensor_parallel"]["async"].get<bool>());
  EXPECT_FALSE(parse_scenario(w).tensor_parallel.async);
  c.ac.mode = RecomputeMode::kNone;
  c.tp = 1;
  c.shard = 4;
  EXPECT_FALSE(candidate_scenario(s, c).tensor_parallel.async);
  w = candidate_scenario_json(base, c, "w", "");
  EXPECT_FALSE(w["tensor_parallel"]["async"].get<bool>());
  EXPECT_FALSE(parse_scenario(w).tensor_parallel.async);
}

}  // namespace
}  // namespace fullshard::planner
