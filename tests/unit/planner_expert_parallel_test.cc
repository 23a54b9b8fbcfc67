// The planner on a scenario with expert parallelism (NOTE [What expert parallelism needs] in
// core/scenario/scenario_ep.cc): ep stays the scenario's, and candidates it does not fit (a shard
// size ep does not divide, an int reshard_after_forward) are left out rather than simulated.
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/planner/candidate_json.h"
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

// Without --ep, a mixture-of-experts model's ep degrees are 1 and the powers of two inside a node
// that divide its experts and the GPUs; a dense model's are {1}.
TEST(PlannerExpertParallel, EpDegreesDivideExpertsAndStayInANode) {
  const ModelConfig moe = *find_model("tiny-moe");  // 4 experts
  EXPECT_EQ(ep_degrees(moe, 8, 8), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(ep_degrees(moe, 8, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(ep_degrees(moe, 6, 8), (std::vector<int>{1, 2}));
  EXPECT_EQ(ep_degrees(*find_model("mixtral-8x7b"), 64, 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(ep_degrees(*find_model("tiny-llama"), 8, 8), (std::vector<int>{1}));
}

// ep as a knob: every degree of the space appears on the shard sizes it divides and nowhere
// else, each candidate's scenario runs it, and the scenario file written for it (plan
// --write-scenario) parses back to the same expert_parallel and mesh.
TEST(PlannerExpertParallel, SearchesEpWhereItDividesTheShardDim) {
  const json j = {{"model", "tiny-moe"},
                  {"training", {{"seq_len", 32}, {"steps", 2}}},
                  {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 4}}}};
  PlanOptions o;
  o.base = parse_scenario(j);
  o.space.gpus = 4;
  o.space.gpus_per_node = 4;
  o.space.n_layers = o.base.model.n_layers;
  o.space.micro_batches = {1};
  o.space.ep_degrees = {1, 2, 4};
  o.threads = 2;
  const PlanResult r = plan(o);
  ASSERT_TRUE(r.best_fits());
  std::map<int, int> per_ep;
  for (const ConfigResult& c : r.configs) {
    const Candidate& k = c.candidate;
    ++per_ep[k.ep];
    EXPECT_EQ(k.shard % k.ep, 0) << candidate_text(k);
    const Scenario s = candidate_scenario(o.base, k);
    EXPECT_EQ(s.expert_parallel.degree, k.ep);
    if (k.ep > 1) {
      EXPECT_NE(candidate_text(k).find("EP " + std::to_string(k.ep)), std::string::npos);
      EXPECT_EQ(candidate_settings_json(k)["ep"], k.ep);
    }
    const Scenario back = parse_scenario(candidate_scenario_json(j, k, "w", ""));
    EXPECT_EQ(back.expert_parallel.degree, k.ep) << candidate_text(k);
    EXPECT_EQ(back.fsdp.mesh_shape, s.fsdp.mesh_shape) << candidate_text(k);
  }
  EXPECT_GT(per_ep[1], 0);
  EXPECT_GT(per_ep[2], 0);
  EXPECT_GT(per_ep[4], 0);  // FSDP over 4 only
  // ep 4 needs a shard dim of 4: no HSDP candidate carries it.
  for (const ConfigResult& c : r.configs)
    if (c.candidate.ep == 4) {
      EXPECT_FALSE(c.candidate.hsdp()) << candidate_text(c.candidate);
    }
}

}  // namespace
}  // namespace fullshard::planner
