// NOTE [FSDP hook host cost] (simulator/cost/hardware_cost_model.cc): every FSDP2 hook call
// (pre-/post-forward, pre-/post-backward of each parameter group) costs the host fsdp_hook_s plus
// fsdp_hook_param_s per parameter of the group. A tiny model on a GPU profile is host-bound
// (microsecond kernels, 10 us launches), so the step grows by exactly what its hooks cost.
#include <gtest/gtest.h>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;
using testing::TinyOptions;

double step_time(double hook_s, double param_s, const std::string& profile, int batch, int seq) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 2;
  o.batch = batch;
  o.seq = seq;
  o.hardware_extra = {
      {"profile", profile}, {"fsdp_hook_s", hook_s}, {"fsdp_hook_param_s", param_s}};
  const sim::SimulationReport r =
      sim::simulate_scenario(parse_scenario(testing::tiny_scenario_json(o)), {});
  EXPECT_TRUE(r.ok()) << testing::problems_text(r);
  return r.step_time_s;
}

TEST(FsdpHookHostCost, HostBoundStepGrowsByEveryHookCall) {
  // tiny-llama: 2 blocks of 9 parameters (2 norms, 7 linears) and the root's 3 (embedding,
  // final norm, output). Each group's 4 hooks run once a step.
  const int groups = 3, params = 9 + 9 + 3;
  const double base = step_time(0, 0, "h100-sxm-80gb", 2, 32);
  EXPECT_NEAR(step_time(1e-3, 0, "h100-sxm-80gb", 2, 32) - base, 4 * groups * 1e-3, 1e-9);
  EXPECT_NEAR(step_time(0, 1e-4, "h100-sxm-80gb", 2, 32) - base, 4 * params * 1e-4, 1e-9);
  // The CPU profile's figures are 0 (fullshard's C++ runtime has no Python hooks): no change.
  EXPECT_DOUBLE_EQ(step_time(0, 0, "cpu", 2, 32),
                   step_time(load_hardware_profile("cpu").fsdp_hook_s, 0, "cpu", 2, 32));
}

}  // namespace
}  // namespace fullshard
