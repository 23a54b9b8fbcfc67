// Steady-state extrapolation (NOTE [Steady state], simulator/extrapolate.cc): the arithmetic,
// and a bounded play extrapolated to training.steps against playing every step.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fstream>
#include <string>

#include "simulator/extrapolate.h"
#include "simulator/simulate.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

TEST(Extrapolate, TotalAddsTheLastStepForEachStepNotPlayed) {
  EXPECT_DOUBLE_EQ(sim::extrapolate_total(10.0, 2.0, 3, 20000), 10.0 + 19997 * 2.0);
  EXPECT_DOUBLE_EQ(sim::extrapolate_total(10.0, 2.0, 3, 3), 10.0);
  EXPECT_DOUBLE_EQ(sim::extrapolate_total(1.0, 0.5, 1, 2147483647), 1.0 + 2147483646 * 0.5);
}

RC_GTEST_PROP(Extrapolate, EqualsThePeriodicSum, ()) {
  // A run whose steps from the second on all take `period`: playing k steps and extrapolating
  // gives what summing every step gives.
  const int steps = *rc::gen::inRange(1, 2000);
  const int k = *rc::gen::inRange(1, steps + 1);
  const double first = *rc::gen::inRange(1, 1000) * 1e-3,
               period = *rc::gen::inRange(1, 1000) * 1e-3;
  double played = first, all = first;
  for (int i = 1; i < steps; ++i) {
    all += period;
    if (i < k) played += period;
  }
  const double last = k == 1 ? first : period;
  if (k == 1 && steps > 1) return;  // one played step is never steady (nothing to compare)
  RC_ASSERT(std::abs(sim::extrapolate_total(played, last, k, steps) - all) <= 1e-9 * all);
}

TEST(Extrapolate, NextStepsDoubleUpToTheCapAndTrainingSteps) {
  EXPECT_EQ(sim::next_simulated_steps(3, 20000), 6);
  EXPECT_EQ(sim::next_simulated_steps(6, 20000), sim::kMaxSimulatedSteps);
  EXPECT_EQ(sim::next_simulated_steps(sim::kMaxSimulatedSteps, 20000), 0);
  EXPECT_EQ(sim::next_simulated_steps(3, 5), 5);
  EXPECT_EQ(sim::next_simulated_steps(5, 5), 0);
}

TEST(Extrapolate, SteadyNeedsTheSameEndStateAndTime) {
  sim::StepEndState a{100, 200, 0, 150, 200, 2};
  EXPECT_TRUE(sim::is_steady(1.0, a, 1.0 + 1e-13, a));
  EXPECT_FALSE(sim::is_steady(1.0, a, 1.001, a));
  sim::StepEndState b = a;
  b.peak_allocated_bytes = 160;  // the last step raised the peak
  EXPECT_FALSE(sim::is_steady(1.0, a, 1.0, b));
  b = a;
  b.num_segments = 3;
  EXPECT_FALSE(sim::is_steady(1.0, a, 1.0, b));
}

// Bounded play + extrapolation == playing every step, for the figures the report extends.
void expect_same_run(const Scenario& s, const std::string& label) {
  sim::SimulateOptions every;
  every.simulated_steps = 0;
  every.checks = false;
  sim::SimulateOptions bounded;
  bounded.checks = false;
  const sim::SimulationReport a = sim::simulate_scenario(s, every),
                              b = sim::simulate_scenario(s, bounded);
  SCOPED_TRACE(label);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.simulated_steps, s.training.steps);
  EXPECT_LT(b.simulated_steps, s.training.steps);
  EXPECT_EQ(b.extrapolated_steps, s.training.steps - b.simulated_steps);
  EXPECT_TRUE(b.steady_state);
  auto near = [](double x, double y) {
    return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y)) + 1e-12;
  };
  EXPECT_PRED2(near, a.total_time_s, b.total_time_s);
  EXPECT_PRED2(near, a.step_time_s, b.step_time_s);
  EXPECT_PRED2(near, a.compute_s, b.compute_s);
  EXPECT_PRED2(near, a.comm_s, b.comm_s);
  EXPECT_PRED2(near, a.exposed_comm_s, b.exposed_comm_s);
  EXPECT_EQ(a.total_tokens, b.total_tokens);
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (size_t i = 0; i < a.classes.size(); ++i) {
    EXPECT_EQ(a.classes[i].peak_allocated_bytes, b.classes[i].peak_allocated_bytes);
    EXPECT_EQ(a.classes[i].peak_reserved_bytes, b.classes[i].peak_reserved_bytes);
    EXPECT_EQ(a.classes[i].peak_host_bytes, b.classes[i].peak_host_bytes);
    EXPECT_EQ(a.classes[i].breakdown_at_peak, b.classes[i].breakdown_at_peak);
    EXPECT_EQ(a.classes[i].end_allocated_bytes, b.classes[i].end_allocated_bytes);
    EXPECT_PRED2(near, a.classes[i].end_time_s, b.classes[i].end_time_s);
  }
}

TEST(Extrapolate, ShippedScenariosMatchPlayingEveryStep) {
  for (const char* name : {"tiny-llama-h100", "gpt2-124m-cpu2", "llama3.1-8b-fsdp8-h100",
                           "llama3.1-70b-hsdp8x128-h100"}) {
    const std::string dir = std::string(FULLSHARD_SOURCE_DIR) + "/scenarios";
    std::ifstream in(dir + "/" + name + ".json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["training"]["steps"] = 14;
    expect_same_run(parse_scenario(j, dir), name);
  }
}

TEST(Extrapolate, PoliciesMatchPlayingEveryStep) {
  testing::TinyOptions o;
  o.steps = 9;
  expect_same_run(testing::tiny_scenario(o), "default");
  o.mesh = {3};  // uneven shards: several rank classes
  expect_same_run(testing::tiny_scenario(o), "uneven shards");
  o.mesh = {2, 2};
  o.cpu_offload = true;
  expect_same_run(testing::tiny_scenario(o), "hsdp + cpu offload");
  o = {};
  o.steps = 9;
  o.grad_accum_steps = 3;
  o.activation_checkpointing = "full";
  o.reshard_after_forward = false;
  expect_same_run(testing::tiny_scenario(o), "grad accumulation + full AC + no reshard");
}

TEST(Extrapolate, StepsUpToTheFirstPlayedAreAllPlayed) {
  testing::TinyOptions o;
  o.steps = 2;
  const sim::SimulationReport r = sim::simulate_scenario(testing::tiny_scenario(o));
  EXPECT_EQ(r.simulated_steps, 2);
  EXPECT_EQ(r.extrapolated_steps, 0);
  EXPECT_EQ(r.classes.at(0).allocated_after_step.size(), 2u);
}

TEST(Extrapolate, HugeStepCountsFinishAndExtrapolate) {
  testing::TinyOptions o;
  o.steps = 2147483647;
  const sim::SimulationReport r = sim::simulate_scenario(testing::tiny_scenario(o));
  EXPECT_TRUE(r.ok());
  EXPECT_LE(r.simulated_steps, sim::kMaxSimulatedSteps);
  EXPECT_EQ(r.extrapolated_steps, 2147483647 - r.simulated_steps);
  EXPECT_GT(r.total_time_s, 2147483600.0 * r.step_time_s);
  EXPECT_EQ(r.classes.at(0).allocated_after_step.size(), static_cast<size_t>(r.simulated_steps));
}

}  // namespace
}  // namespace fullshard
