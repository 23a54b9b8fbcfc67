// NOTE [Worst-case routing] (simulator/worst_routing.h): with ep > 1 the worst routing (every
// token of every rank to experts 0 .. top_k - 1) is played beside the assumed one; its peak is
// the max receive buffers' and above the balanced and skewed ones', and without ep (static MoE
// shapes) or when the scenario already assumes it, nothing is played.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "simulator/simulate.h"
#include "simulator/worst_routing.h"

namespace fullshard::sim {
namespace {

using nlohmann::json;

json tiny_moe(int ep, json routing) {
  json j = {{"model", "tiny-moe"},
            {"training", {{"batch_per_rank", 8}, {"seq_len", 64}, {"steps", 2}}},
            {"fsdp", {{"mesh", {{"shape", {4}}, {"dim_names", {"shard"}}}}}},
            {"expert_parallel", {{"degree", ep}}},
            {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 4}}}};
  if (!routing.is_null()) j["training"]["moe_routing"] = routing;
  return j;
}

uint64_t peak(const Scenario& s, bool reserved = true) {
  SimulateOptions o;
  o.checks = false;
  uint64_t p = 0;
  for (const auto& c : simulate_scenario(s, o).classes)
    p = std::max(p, reserved ? c.peak_reserved_bytes : c.peak_allocated_bytes);
  return p;
}
uint64_t peak_reserved(const Scenario& s) { return peak(s); }

TEST(WorstRouting, PlayedOnlyWhereRoutingMovesMemory) {
  EXPECT_FALSE(simulate_worst_routing(parse_scenario(tiny_moe(1, nullptr))));  // static shapes
  EXPECT_FALSE(simulate_worst_routing(parse_scenario(tiny_moe(2, "worst"))));  // already
  EXPECT_FALSE(simulate_worst_routing(parse_scenario(
      {{"model", "tiny-llama"},
       {"training", {{"seq_len", 32}}},
       {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 2}}}})));
  EXPECT_TRUE(routing_moves_memory(parse_scenario(tiny_moe(2, nullptr))));
}

TEST(WorstRouting, PeakIsAtLeastTheAssumedRoutings) {
  const Scenario balanced = parse_scenario(tiny_moe(2, nullptr));
  const Scenario skewed = parse_scenario(tiny_moe(2, {{"hot_expert_factor", 2}}));
  const auto worst = simulate_worst_routing(balanced);
  ASSERT_TRUE(worst);
  EXPECT_EQ(worst->hot_expert_factor, 4.0);  // num_experts
  EXPECT_FALSE(worst->out_of_memory);
  EXPECT_GE(worst->peak_reserved_bytes, peak_reserved(skewed));
  // tiny-moe is top-2 of 4: a hot factor of 2 already sends every token to expert 0, but the
  // worst also sends each token's second pick to expert 1, the same ep rank's.
  EXPECT_GT(worst->peak_allocated_bytes, peak(skewed, false));
  EXPECT_GT(peak(skewed, false), peak(balanced, false));
  // No rank receives more than the max receive buffers hold, and the worst routing fills them.
  json max_buffers = tiny_moe(2, nullptr);
  max_buffers["expert_parallel"]["receive_buffers"] = "max";
  EXPECT_EQ(worst->peak_allocated_bytes, peak(parse_scenario(max_buffers), false));
  // The same routing written in the scenario plays to the same peak.
  EXPECT_EQ(worst->peak_reserved_bytes, peak_reserved(parse_scenario(tiny_moe(2, "worst"))));
  EXPECT_EQ(simulate_worst_routing(skewed)->peak_reserved_bytes, worst->peak_reserved_bytes);
}

TEST(WorstRouting, ScenarioSpellsIt) {
  EXPECT_EQ(parse_scenario(tiny_moe(2, "worst")).model.moe.hot_expert_factor, 4.0);
  EXPECT_EQ(parse_scenario(tiny_moe(2, "balanced")).model.moe.hot_expert_factor, 1.0);
  try {
    parse_scenario(tiny_moe(2, "wrost"));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "training.moe_routing");
  }
}

}  // namespace
}  // namespace fullshard::sim
