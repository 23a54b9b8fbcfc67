// Capacity-factor token dropping (model.moe.capacity_factor, NOTE [Capacity factor] in
// core/model/moe_routing.h): Megatron-LM's capacity, each expert's count capped at it (empty
// experts stay empty, top-k 2, ep 2 with uneven routing), the worst routing bounded by it, the
// simulator's dispatch sized by the kept rows, and the scenario's one-line errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/model/moe_dispatch.h"
#include "core/model/moe_routing.h"
#include "core/runtime/moe_args.h"
#include "core/runtime/op_args.h"
#include "simulator/worst_routing.h"
#include "tests/gpu/recorded_ops.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

// tiny-moe (4 experts, top-2) at batch 2 x 32: 64 tokens per rank, 128 routed slots.
json tiny_moe(int ep, json moe, json training = json::object()) {
  json extra = {{"training", training}};
  if (ep > 1) extra["expert_parallel"] = {{"degree", ep}};
  json model = {{"name", "tiny-moe"}};
  if (!moe.is_null()) model["moe"] = moe;
  return recorded_ops::scenario_json(model, nullptr, {2}, extra);
}

MoeConfig moe(int64_t experts, int64_t top_k, double factor) {
  MoeConfig m;
  m.num_experts = experts;
  m.top_k = top_k;
  m.capacity_factor = factor;
  return m;
}

TEST(MoeCapacity, MegatronsCapacityOfARanksTokens) {
  EXPECT_EQ(expert_capacity(moe(8, 2, 1.25), 100), 32);  // ceil(200 / 8 x 1.25) = ceil(31.25)
  EXPECT_EQ(expert_capacity(moe(8, 2, 1.0), 100), 25);
  EXPECT_EQ(expert_capacity(moe(8, 1, 1.0), 3), 1);      // ceil(0.375)
  EXPECT_EQ(expert_capacity(moe(8, 2, 0.0), 100), 100);  // dropless: every token
  EXPECT_EQ(expert_capacity(moe(8, 2, 8.0), 100), 100);  // at most every token
  EXPECT_EQ(expert_capacity(moe(4, 2, 1.0), 0), 0);
}

TEST(MoeCapacity, CountsCappedEmptyExpertsStayEmpty) {
  MoeConfig m = moe(4, 2, 1.0);  // capacity ceil(128 / 4) = 32 of 64 tokens
  m.hot_expert_factor = 2.0;     // dropless: {64, 22, 21, 21}
  EXPECT_EQ(assumed_tokens_per_expert(m, 64), (std::vector<int64_t>{32, 22, 21, 21}));
  m.hot_expert_factor = 1.0;
  m.expert_load = {0.5, 0.5, 0.0, 0.0};  // two experts take every slot; two get none
  EXPECT_EQ(assumed_tokens_per_expert(m, 64), (std::vector<int64_t>{32, 32, 0, 0}));
  m.expert_load.clear();
  EXPECT_EQ(assumed_tokens_per_expert(m, 64), (std::vector<int64_t>{32, 32, 32, 32}));
  EXPECT_EQ(capped_tokens_per_expert({40, 0, 7}, 8), (std::vector<int64_t>{8, 0, 7}));
  // Every group still padded to the alignment, an empty one to one alignment.
  EXPECT_EQ(grouped_rows({32, 32, 0, 0}, 8), 80);
}

// Capacity (NOTE [Capacity factor] in core/model/moe_routing.h): a capped expert no longer takes every token, so the worst routing
// fills all of ep rank 0's experts (here 4 of 8 with top-2: 32 slots each, capped at 16), and
// rank 0 then receives max_receive_rows' bound; dropless, the worst stays every token to experts
// 0 .. top_k - 1.
TEST(MoeCapacity, WorstRoutingFillsTheHotRanksCapacity) {
  MoeConfig m = moe(8, 2, 1.0);  // capacity ceil(128 / 8) = 16
  m.hot_expert_factor = 8.0;
  const std::vector<int64_t> worst = assumed_tokens_per_expert(m, 64, 2);
  EXPECT_EQ(worst, (std::vector<int64_t>{16, 16, 16, 16, 0, 0, 0, 0}));
  const EpRouting r0 = ep_routing(worst, 2, 0), r1 = ep_routing(worst, 2, 1);
  EXPECT_EQ(r0.recv_rows, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(r1.recv_rows, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(max_receive_rows(64, 2, 8, 2, 16), 128);
  m.capacity_factor = 0;
  EXPECT_EQ(assumed_tokens_per_expert(m, 64, 2), (std::vector<int64_t>{64, 64, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(max_receive_rows(64, 2, 8, 2, 64), 256);
  // top_k above the experts per rank: ep 4 leaves one expert each; every token takes it, the
  // rest of its slots spread over the others, then capped (capacity ceil(192 / 4) = 48).
  MoeConfig k3 = moe(4, 3, 1.0);
  k3.hot_expert_factor = 4.0;
  EXPECT_EQ(assumed_tokens_per_expert(k3, 64, 4), (std::vector<int64_t>{48, 43, 43, 42}));
}

// The pad-row input of each MoE layer call is the rows rank 0 receives: 2 layers, forward and
// backward, per recorded step.
std::vector<int64_t> received_rows(const Scenario& s, int rank) {
  std::vector<int64_t> rows;
  for (const OpCall& op : recorded_ops::record(s, rank)) {
    validate_op_args(op);
    if (op.kind == OpKind::kPadRow && op.name.find("experts.vstack") != std::string::npos &&
        op.name.find("backward") == std::string::npos)
      rows.push_back(op.inputs[0].meta.numel() / 64);
  }
  return rows;
}

// ep 2, hottest expert twice its share ({64, 22, 21, 21} dropless): capacity 32 drops half of
// expert 0's slots, so rank 0 receives 2 x (32 + 22) rows instead of 2 x (64 + 22); rank 1's 2 x
// 42 are under capacity. The worst routing's peak falls to the capacity's bound (128 rows, not
// 256), and every op decodes, one kExpertCapacity per MoE layer call.
TEST(MoeCapacity, SimulatorDropsTheOverflowAndBoundsTheWorstPeak) {
  const json hot = {{"moe_routing", {{"hot_expert_factor", 2.0}}}};
  const Scenario dropless = parse_scenario(tiny_moe(2, nullptr, hot));
  const Scenario capped = parse_scenario(tiny_moe(2, {{"capacity_factor", 1.0}}, hot));
  EXPECT_EQ(received_rows(dropless, 0), std::vector<int64_t>(2, 172));
  EXPECT_EQ(received_rows(capped, 0), std::vector<int64_t>(2, 108));
  EXPECT_EQ(received_rows(capped, 1), std::vector<int64_t>(2, 84));
  int drops = 0;
  for (const OpCall& op : recorded_ops::record(capped))
    if (op.kind == OpKind::kExpertCapacity) {
      ++drops;
      const CapacityArgs a = CapacityArgs::decode(op);
      EXPECT_EQ(a.capacity, 32);
      EXPECT_EQ(a.policy, 0);
    }
  EXPECT_EQ(drops, 2);
  EXPECT_EQ(received_rows(sim::with_worst_routing(capped), 0), std::vector<int64_t>(2, 128));
  EXPECT_EQ(received_rows(sim::with_worst_routing(dropless), 0), std::vector<int64_t>(2, 256));
  const auto worst_capped = sim::simulate_worst_routing(capped);
  const auto worst_dropless = sim::simulate_worst_routing(dropless);
  ASSERT_TRUE(worst_capped && worst_dropless);
  EXPECT_LT(worst_capped->peak_allocated_bytes, worst_dropless->peak_allocated_bytes);
  const auto r = sim::simulate_scenario(capped);
  ASSERT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
  EXPECT_LE(r.classes.at(0).peak_allocated_bytes, worst_capped->peak_allocated_bytes);
  // ep 1: every MoE buffer keeps its static shape; only the grouped GEMMs' rows fall.
  const auto one = recorded_ops::record(parse_scenario(tiny_moe(1, {{"capacity_factor", 1.0}}, hot)));
  int grouped = 0;
  for (const OpCall& op : one) {
    if (op.kind == OpKind::kGroupedMM) {
      EXPECT_EQ(GroupedMmArgs::decode(op).computed_rows, 104);
      ++grouped;
    }
  }
  EXPECT_GT(grouped, 0);
}

TEST(MoeCapacity, OneLineErrorsNameTheField) {
  using fullshard::testing::input_error_of;
  auto err = [](const json& j) { return input_error_of([&] { parse_scenario(j); }); };
  EXPECT_NE(err(tiny_moe(1, {{"capacity_factor", -1}})).find("model.moe.capacity_factor"),
            std::string::npos);
  EXPECT_NE(err(tiny_moe(1, {{"capacity_factor", "1.25"}})).find("model.moe.capacity_factor"),
            std::string::npos);
  EXPECT_NE(err(tiny_moe(1, {{"drop_policy", "probs"}})).find("model.moe.drop_policy"),
            std::string::npos);
  EXPECT_NE(err(tiny_moe(1, {{"capacity_factor", 1}, {"drop_policy", "random"}}))
                .find("model.moe.drop_policy"),
            std::string::npos);
  EXPECT_NE(err(tiny_moe(1, {{"capacity", 1}})).find("model.moe"), std::string::npos);
  json dense = recorded_ops::scenario_json({{"name", "tiny-llama"}, {"moe", {{"capacity_factor", 1}}}},
                                           nullptr, {2});
  EXPECT_NE(err(dense).find("the model has no experts"), std::string::npos);
  const Scenario ok =
      parse_scenario(tiny_moe(1, {{"capacity_factor", 1.25}, {"drop_policy", "position"}}));
  EXPECT_EQ(ok.model.moe.capacity_factor, 1.25);
  EXPECT_EQ(ok.model.moe.drop_policy, MoeDropPolicy::kPosition);
  EXPECT_FALSE(parse_scenario(tiny_moe(1, {{"capacity_factor", 0}})).model.moe.drops_tokens());
}

}  // namespace
}  // namespace fullshard
