// plan --float8 (NOTE [Float8 candidates] in search_space.cc): the float8 choices as a knob of the
// search, left out where training.float8 refuses them, written into --write-scenario's file as
// simulated, and the tokens/s gain in the family reasons.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/planner/candidate_json.h"
#include "simulator/planner/families.h"
#include "simulator/planner/planner.h"
#include "simulator/planner/search_space.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

const json kBase = {
    {"name", "b"},
    {"model", "tiny-llama"},
    {"training", {{"seq_len", 64}, {"steps", 2}}},
    {"fsdp", {{"mesh", {{"shape", {2}}}}}},
    {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 2}}}};

TEST(PlannerFloat8, ChoicesOnlyWhenAskedAndWhereTheyRun) {
  SpaceOptions o;
  o.gpus = 2;
  o.gpus_per_node = 2;
  o.n_layers = 2;
  o.micro_batches = {1};
  size_t off = enumerate_candidates(o).size();
  for (const Candidate& c : enumerate_candidates(o)) EXPECT_EQ(c.float8, Float8Choice::kOff);
  o.float8 = float8_choices();
  const auto all = enumerate_candidates(o);
  EXPECT_GT(all.size(), off);
  size_t n_off = 0;
  for (const Candidate& c : all) {
    if (c.float8 == Float8Choice::kOff) ++n_off;
    if (c.float8 != Float8Choice::kOff) {
      EXPECT_NE(c.ac.mode, RecomputeMode::kSelectiveOp);
    }
    if (c.float8 == Float8Choice::kTensorwiseAllGather) {
      EXPECT_GE(c.shard, 2);
      EXPECT_FALSE(c.cpu_offload);
      EXPECT_NE(c.reshard.kind, ReshardAfterForward::Kind::kInt);
    }
  }
  EXPECT_EQ(n_off, off);  // the bf16 space is unchanged
}

// Round trip: a float8 candidate's scenario and the file --write-scenario writes for it parse to
// the same training.float8, and every float8 candidate loads.
TEST(PlannerFloat8, WrittenScenarioRoundTrips) {
  const Scenario s = parse_scenario(kBase);
  for (Float8Choice f : float8_choices()) {
    Candidate c;
    c.shard = 2;
    c.precision = Precision::kBf16Fp32Reduce;
    c.ac.mode = RecomputeMode::kFull;
    c.float8 = f;
    const Scenario a = candidate_scenario(s, c);
    const Scenario b = parse_scenario(candidate_scenario_json(kBase, c, "w", ""));
    SCOPED_TRACE(float8_choice_name(f));
    EXPECT_EQ(a.training.float8.recipe, b.training.float8.recipe);
    EXPECT_EQ(a.training.float8.enable_fsdp_float8_all_gather,
              b.training.float8.enable_fsdp_float8_all_gather);
    EXPECT_EQ(a.training.float8.precompute_float8_dynamic_scale_for_fsdp,
              b.training.float8.precompute_float8_dynamic_scale_for_fsdp);
    EXPECT_EQ(a.training.float8.filter_fqns, b.training.float8.filter_fqns);
    EXPECT_EQ(a.training.float8.enabled(), f != Float8Choice::kOff);
  }
}

// A plan over float8 ranks every choice and gives each one the winner did not take a reason
// with its tokens/s against the best.
TEST(PlannerFloat8, PlanReasonsCarryTheGain) {
  PlanOptions o;
  o.base = parse_scenario(kBase);
  o.space.gpus = 2;
  o.space.gpus_per_node = 2;
  o.space.n_layers = 2;
  o.space.micro_batches = {1};
  o.space.float8 = float8_choices();
  o.threads = 2;
  const PlanResult r = plan(o);
  ASSERT_TRUE(r.best_fits());
  int float8_reasons = 0;
  for (const FamilyReason& f : family_reasons(r))
    if (f.setting == "float8") {
      ++float8_reasons;
      EXPECT_NE(f.reason.find("tokens/s"), std::string::npos) << f.reason;
    }
  EXPECT_EQ(float8_reasons, 4);  // the five choices but the winner's
}

// NOTE [Branch and bound] with float8 candidates: the 2-block proxies bound float8 programs
// too, so the pruned search recommends what the exhaustive one does.
TEST(PlannerFloat8, PrunedSearchFindsTheExhaustiveBest) {
  PlanOptions o;
  o.base = parse_scenario(kBase);
  o.space.gpus = 2;
  o.space.gpus_per_node = 2;
  o.space.n_layers = 2;
  o.space.micro_batches = {1, 2};
  o.space.float8 = float8_choices();
  o.threads = 2;
  const PlanResult pruned = plan(o);
  o.prune = false;
  const PlanResult all = plan(o);
  ASSERT_TRUE(pruned.best_fits() && all.best_fits());
  EXPECT_TRUE(pruned.configs.front().candidate == all.configs.front().candidate)
      << candidate_text(pruned.configs.front().candidate) << " vs "
      << candidate_text(all.configs.front().candidate);
  EXPECT_EQ(pruned.configs.front().step_time_s, all.configs.front().step_time_s);
  for (const ConfigResult& c : pruned.configs)  // bounds never above what simulation says
    if (c.verdict == Verdict::kSimulated && c.bound_step_time_s > 0) {
      EXPECT_LE(c.bound_step_time_s, c.step_time_s * (1 + 1e-9)) << candidate_text(c.candidate);
    }
}

}  // namespace
}  // namespace fullshard::planner
