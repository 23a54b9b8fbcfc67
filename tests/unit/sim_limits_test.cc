// Simulation limits (NOTE [Simulation limits], simulator/sim_limits.cc): the instruction
// estimate bounds the recorded count from above, and oversized scenarios are refused with an
// InputError naming the field and the limit.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "simulator/sim_limits.h"
#include "simulator/simulate.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

RC_GTEST_PROP(SimLimits, EstimateIsAnUpperBoundOfTheRecordedProgram, ()) {
  testing::TinyOptions o;
  o.model = *rc::gen::element<std::string>("tiny-llama", "tiny-gpt2");
  o.mesh = *rc::gen::element(std::vector<int>{1}, std::vector<int>{2}, std::vector<int>{3},
                             std::vector<int>{2, 2});
  o.activation_checkpointing = *rc::gen::element<std::string>("none", "full", "selective_op");
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.units = *rc::gen::element<std::string>("blocks", "root");
  o.reshard_after_forward = *rc::gen::arbitrary<bool>();
  o.forward_prefetch = *rc::gen::inRange(0, 3);
  o.backward_prefetch = *rc::gen::inRange(1, 3);
  o.grad_accum_steps = *rc::gen::inRange(1, 4);
  o.steps = *rc::gen::inRange(1, 4);
  const Scenario s = testing::tiny_scenario(o);
  sim::SimulateOptions so;
  so.checks = false;
  const sim::SimulationReport r = sim::simulate_scenario(s, so);
  const uint64_t estimate = sim::estimate_program_instructions(s, r.simulated_steps);
  for (const auto& c : r.classes) RC_ASSERT(c.instructions <= estimate);
  // ... and not wildly above it (the limits would refuse what fits).
  RC_ASSERT(estimate <= 3 * r.classes.at(0).instructions);
}

std::string refusal(const Scenario& s, bool all_ranks = false) {
  try {
    sim::check_simulation_limits(s, sim::kFirstSimulatedSteps, all_ranks);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SimLimits, RefusesHugeModelsMicroBatchesAndWorlds) {
  nlohmann::json j = testing::tiny_scenario_json({});
  j["model"] = {
      {"arch", "llama"}, {"vocab_size", 256}, {"dim", 64},      {"n_layers", int64_t{1} << 40},
      {"n_heads", 4},    {"n_kv_heads", 4},   {"ffn_dim", 128}, {"max_seq_len", 64}};
  std::string e = refusal(parse_scenario(j));
  EXPECT_NE(e.find("model.n_layers"), std::string::npos) << e;
  EXPECT_NE(e.find("1099511627776"), std::string::npos) << e;
  j["model"]["n_layers"] = 1000000;
  EXPECT_NE(refusal(parse_scenario(j)).find("4096"), std::string::npos);

  testing::TinyOptions o;
  o.grad_accum_steps = 2147483647;
  e = refusal(testing::tiny_scenario(o));
  EXPECT_NE(e.find("training.grad_accum_steps"), std::string::npos) << e;
  EXPECT_NE(e.find("limit of 4000000"), std::string::npos) << e;

  o = {};
  o.mesh = {1 << 20};
  e = refusal(testing::tiny_scenario(o));
  EXPECT_NE(e.find("1048576 ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("131072"), std::string::npos) << e;
}

TEST(SimLimits, EveryRankCountsEveryProgram) {
  testing::TinyOptions o;
  o.mesh = {4096};
  o.steps = 3;
  const Scenario s = testing::tiny_scenario(o);
  EXPECT_EQ(refusal(s, false), "");
  const sim::SimulationSize z = sim::estimate_simulation_size(s, 3, true);
  EXPECT_EQ(z.played_programs, 4096u);
  EXPECT_EQ(z.recorded_programs,
            sim::rank_classes(s).size());  // tiny rows over 4,096: uneven shards
}

TEST(SimLimits, ShippedScenariosAreAccepted) {
  for (const char* name :
       {"llama3.1-70b-fsdp1024-h100", "llama3.1-70b-hsdp8x128-h100", "gpt2-124m-cpu2"}) {
    const Scenario s =
        load_scenario_file(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/" + name + ".json");
    EXPECT_EQ(refusal(s), "") << name;
    EXPECT_NO_THROW(sim::check_simulation_limits(s, s.training.steps, true))
        << name;  // --ranks all
  }
}

}  // namespace
}  // namespace fullshard
