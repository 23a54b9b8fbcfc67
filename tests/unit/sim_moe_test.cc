// The mixture-of-experts layer in the simulator (core/model/moe_layer.cc, docs/moe.md): the
// module tree's parameters, the op sequence torchtitan's MoE runs with its FLOPs and shapes,
// memory that does not depend on routing, and what the scenario checks refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "core/common/error.h"
#include "core/model/moe_routing.h"
#include "core/model/transformer.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/moe_args.h"
#include "core/runtime/op_args.h"
#include "simulator/report.h"
#include "tests/gpu/recorded_ops.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

int64_t module_tree_params(const ModelConfig& c) {
  Transformer t(c);
  int64_t n = 0;
  t.root().for_each_param([&](Param& p) {
    int64_t e = 1;
    for (int64_t d : p.shape) e *= d;
    n += e;
  });
  return n;
}

TEST(MoeModuleTree, ParametersAreTheConfigCount) {
  for (const char* name : {"tiny-moe", "mixtral-8x7b", "qwen3-30b-a3b"}) {
    const ModelConfig c = *find_model(name);
    EXPECT_EQ(module_tree_params(c), parameter_count(c)) << name;
  }
  ModelConfig c = *find_model("tiny-moe");
  c.moe.first_dense_layers = 1;  // layer 0 keeps feed_forward
  EXPECT_EQ(module_tree_params(c), parameter_count(c));
  Transformer t(c);
  EXPECT_EQ(t.root().child("layers").child("1").child("moe").child("experts").param("w2").shape,
            (Shape{4, 64, 32}));
}

TEST(MoeRouting, BalancedAndPaddedAsTorchtitan) {
  EXPECT_EQ(balanced_tokens_per_expert(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  // Each group rounded up to 8, an empty expert padded to 8 too.
  EXPECT_EQ(grouped_rows({3, 9, 0, 16}, 8), 8 + 16 + 8 + 16);
  EXPECT_EQ(permuted_rows(1024, 4, 8), 1024 + 32);
  EXPECT_EQ(permuted_rows(1021, 4, 8), 1056);  // round_up(1021 + 32, 8)
  for (int64_t n : {0, 1, 7, 100, 1023})
    for (int64_t e : {1, 3, 8})
      EXPECT_LE(grouped_rows(balanced_tokens_per_expert(n, e), 8), permuted_rows(n, e, 8));
}

Scenario tiny_moe(const json& extra = json::object(), const std::vector<int>& mesh = {2}) {
  return parse_scenario(recorded_ops::scenario_json("tiny-moe", nullptr, mesh, extra));
}

TEST(MoeOps, EveryMoeOpDecodesWithItsShapesAndFlops) {
  const Scenario s = tiny_moe();
  const auto ops = recorded_ops::record(s);
  std::map<OpKind, int> count;
  const int64_t N = 2 * 32, K = 2, E = 4, D = 64, Fe = 32;
  const int64_t computed = grouped_rows(balanced_tokens_per_expert(N * K, E), 8);
  for (const OpCall& op : ops) {
    validate_op_args(op);
    ++count[op.kind];
    if (op.kind == OpKind::kGroupedMM) {
      const auto g = GroupedMmArgs::decode(op);
      EXPECT_EQ(g.rows, permuted_rows(N * K, E, 8)) << op.name;
      EXPECT_EQ(g.computed_rows, computed);
      EXPECT_DOUBLE_EQ(op.flops, 2.0 * computed * g.k * g.n);
      EXPECT_TRUE((g.k == D && g.n == Fe) || (g.k == Fe && g.n == D)) << op.name;
    }
  }
  // Per MoE layer (2): three grouped GEMMs forward, three grad-weight, three grad-input (w1's
  // input gradient reaches the permuted tokens, which need grad).
  EXPECT_EQ(count[OpKind::kGroupedMM], 6);
  EXPECT_EQ(count[OpKind::kGroupedMMBackwardWeight], 6);
  EXPECT_EQ(count[OpKind::kGroupedMMBackwardInput], 6);
  EXPECT_EQ(count[OpKind::kSoftmax], 2);
  EXPECT_EQ(count[OpKind::kSoftmaxBackward], 2);
  EXPECT_EQ(count[OpKind::kTopK], 2);
  EXPECT_EQ(count[OpKind::kTopKBackward], 2);
  EXPECT_EQ(count[OpKind::kRouteNorm], 2);
  EXPECT_EQ(count[OpKind::kHistogram], 4);  // the router's and the reorderer's
  EXPECT_EQ(count[OpKind::kPermuteIndices], 2);
  EXPECT_EQ(count[OpKind::kWeightedSum], 2);
  EXPECT_EQ(count[OpKind::kWeightedSumBackward], 2);
  EXPECT_EQ(count[OpKind::kIndexAddRows], 4);  // x[order // K] and the padded buffer's gather
}

// DeepSeek-style sigmoid scores without route_norm, a scale and a dense first layer.
TEST(MoeOps, SigmoidScoresScaleAndDenseFirstLayer) {
  Scenario s = tiny_moe();
  s.model.moe.score_func = MoeScoreFunc::kSigmoid;
  s.model.moe.route_norm = false;
  s.model.moe.route_scale = 2.5;
  s.model.moe.first_dense_layers = 1;
  std::map<OpKind, int> count;
  for (const OpCall& op : recorded_ops::record(s)) {
    validate_op_args(op);
    ++count[op.kind];
    if (op.kind == OpKind::kScale && op.name == "layers.1.moe.router.scale") {
      EXPECT_DOUBLE_EQ(op.fargs.at(0), 2.5);
    }
  }
  EXPECT_EQ(count[OpKind::kSigmoid], 1);
  EXPECT_EQ(count[OpKind::kSigmoidBackward], 1);
  EXPECT_EQ(count[OpKind::kSoftmax], 0);
  EXPECT_EQ(count[OpKind::kRouteNorm], 0);
  EXPECT_EQ(count[OpKind::kGroupedMM], 3);
}

// Qwen3's attention: q [n_heads * head_dim, D] with head_dim 32 over dim 64 / 4 heads, and an
// RMSNorm of head_dim on each head of q and k before RoPE (torchtitan qwen3's q_norm / k_norm).
TEST(MoeOps, Qwen3DecoupledHeadsAndQkNorms) {
  Scenario s = tiny_moe();
  s.model.explicit_head_dim = 32;
  s.model.qk_norm = true;
  std::map<std::string, Shape> out_shape;
  for (const OpCall& op : recorded_ops::record(s)) {
    validate_op_args(op);
    if (op.kind == OpKind::kLinear || op.kind == OpKind::kRMSNorm)
      out_shape[op.name] = op.outputs[0].meta.shape;
  }
  EXPECT_EQ(out_shape["layers.0.attention.wq"], (Shape{2, 32, 4 * 32}));
  EXPECT_EQ(out_shape["layers.0.attention.wk"], (Shape{2, 32, 2 * 32}));
  EXPECT_EQ(out_shape["layers.0.attention.q_norm"], (Shape{2 * 32, 4, 32}));
  EXPECT_EQ(out_shape["layers.0.attention.k_norm"], (Shape{2 * 32, 2, 32}));
  EXPECT_EQ(out_shape["layers.0.attention.wo"], (Shape{2, 32, 64}));
  const auto r = sim::simulate_scenario(s);
  EXPECT_TRUE(r.problems.empty()) << fullshard::testing::problems_text(r);
  EXPECT_EQ(module_tree_params(s.model), parameter_count(s.model));
}

TEST(MoeSimulate, TinyMoeSimulatesCleanlyWithStableMemory) {
  const Scenario s = tiny_moe({{"training", {{"steps", 3}}}});
  const auto r = sim::simulate_scenario(s);
  EXPECT_TRUE(r.problems.empty()) << fullshard::testing::problems_text(r);
  EXPECT_FALSE(r.out_of_memory);
  EXPECT_GT(r.step_time_s, 0);
  for (const auto& c : r.classes)
    for (size_t i = 1; i < c.allocated_after_step.size(); ++i)
      EXPECT_EQ(c.allocated_after_step[i], c.allocated_after_step[0]);
  // Full activation checkpointing recomputes the MoE layer in backward: a lower peak.
  const auto ac = sim::simulate_scenario(
      tiny_moe({{"training", {{"steps", 3}, {"activation_checkpointing", "full"}}}}));
  EXPECT_TRUE(ac.problems.empty()) << fullshard::testing::problems_text(ac);
  EXPECT_LT(ac.classes[0].peak_allocated_bytes, r.classes[0].peak_allocated_bytes);
}

// routed_input = x[order // top_k] holds N tokens x top-k rows of D.
TEST(MoeSimulate, RoutedInputHoldsTopKRowsPerToken) {
  int64_t gathered_rows = 0;
  for (const OpCall& op : recorded_ops::record(tiny_moe()))
    if (op.kind == OpKind::kGatherRows && op.name == "layers.0.moe.routed_input")
      gathered_rows = op.outputs[0].meta.numel() / 64;
  EXPECT_EQ(gathered_rows, 2 * 32 * 2);
}

TEST(MoeRouting, HotExpertGetsItsFactorCappedAtEveryToken) {
  EXPECT_EQ(skewed_tokens_per_expert(64, 2, 4, 1.0), balanced_tokens_per_expert(128, 4));
  EXPECT_EQ(skewed_tokens_per_expert(64, 2, 4, 1.5), (std::vector<int64_t>{48, 27, 27, 26}));
  EXPECT_EQ(skewed_tokens_per_expert(64, 2, 4, 3.5), (std::vector<int64_t>{64, 22, 21, 21}));
  EXPECT_EQ(skewed_tokens_per_expert(64, 2, 4, 4.0), (std::vector<int64_t>{64, 64, 0, 0}));  // worst
  EXPECT_EQ(skewed_tokens_per_expert(10, 1, 1, 3.0), (std::vector<int64_t>{10}));
}

// NOTE [Expert load] (core/model/moe_routing.h): shares by largest remainder, capped at every
// token, the cap's excess spread by the others' shares.
TEST(MoeRouting, ExpertLoadByLargestRemainderCappedAtEveryToken) {
  EXPECT_EQ(loaded_tokens_per_expert(64, 2, {0.25, 0.25, 0.25, 0.25}),
            balanced_tokens_per_expert(128, 4));
  EXPECT_EQ(loaded_tokens_per_expert(64, 2, {0.5, 0.25, 0.125, 0.125}),
            (std::vector<int64_t>{64, 32, 16, 16}));
  // 89.6 wanted by expert 0, capped at 64; the other 25 spread evenly, ties to the lower expert.
  EXPECT_EQ(loaded_tokens_per_expert(64, 2, {0.7, 0.1, 0.1, 0.1}),
            (std::vector<int64_t>{64, 22, 21, 21}));
  // Top-2 cannot send every token to one expert: the rest goes evenly to the others.
  EXPECT_EQ(loaded_tokens_per_expert(64, 2, {1, 0, 0, 0}), (std::vector<int64_t>{64, 22, 21, 21}));
  EXPECT_EQ(loaded_tokens_per_expert(64, 1, {1, 0, 0, 0}), (std::vector<int64_t>{64, 0, 0, 0}));
  EXPECT_EQ(loaded_tokens_per_expert(0, 2, {0.5, 0.5}), (std::vector<int64_t>{0, 0}));
}

// training.moe_routing {"expert_load": [...]}: normalised shares on the model; at ep = 1 they move
// the grouped GEMMs' rows only; with ep the rank holding the loaded experts receives more; each
// bad form is one line naming the field.
TEST(MoeRouting, ExpertLoadInTheScenario) {
  const Scenario s = tiny_moe(
      {{"training", {{"steps", 2}, {"moe_routing", {{"expert_load", {7, 1, 1, 1}}}}}}});
  EXPECT_EQ(s.model.moe.expert_load, (std::vector<double>{0.7, 0.1, 0.1, 0.1}));
  int64_t rows = -1;
  for (const OpCall& op : recorded_ops::record(s))
    if (op.kind == OpKind::kGroupedMM) rows = GroupedMmArgs::decode(op).computed_rows;
  EXPECT_EQ(rows, 64 + 3 * 24);  // 2 x 32 tokens x top-2: 64, 22, 21, 21, padded to 8
  auto ep_peaks = [](const json& routing) {
    json extra = {{"training", {{"steps", 2}}}, {"expert_parallel", {{"degree", 2}}}};
    if (!routing.is_null()) extra["training"]["moe_routing"] = routing;
    const auto r = sim::simulate_scenario(
        parse_scenario(recorded_ops::scenario_json("tiny-moe", nullptr, {2}, extra)));
    EXPECT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
    std::map<int, uint64_t> peak;
    for (const auto& c : r.classes)
      for (int rank : c.ranks) peak[rank] = c.peak_allocated_bytes;
    return peak;
  };
  const auto balanced = ep_peaks(nullptr);
  const auto loaded = ep_peaks({{"expert_load", {0.4, 0.4, 0.1, 0.1}}});
  EXPECT_EQ(balanced.at(0), balanced.at(1));
  EXPECT_GT(loaded.at(0), balanced.at(0));  // experts 0 and 1 live on ep rank 0
  EXPECT_LT(loaded.at(1), balanced.at(1));
  auto refused = [](const json& routing, const std::string& where) {
    json j = recorded_ops::scenario_json("tiny-moe", nullptr, {2});
    j["training"]["moe_routing"] = routing;
    try {
      parse_scenario(j);
      ADD_FAILURE() << "expected InputError at " << where << " for " << routing.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), where) << e.what();
    }
  };
  refused({{"expert_load", {1, 1, 1}}}, "training.moe_routing.expert_load");
  refused({{"expert_load", {0, 0, 0, 0}}}, "training.moe_routing.expert_load");
  refused({{"expert_load", {1, -1, 1, 1}}}, "training.moe_routing.expert_load[]");
  refused({{"expert_load", {1, 1, 1, 1}}, {"statistic", "mean"}}, "training.moe_routing.statistic");
  refused({{"hot_expert_factor", 2}, {"statistic", "mean"}}, "training.moe_routing.statistic");
  refused({{"expert_load", {1, 1, 1, 1}}, {"hot_expert_factor", 2}}, "training.moe_routing");
  refused({{"expert_load", "missing.jsonl"}, {"statistic", "median"}},
          "training.moe_routing.statistic");
}

// training.moe_routing moves the grouped GEMMs' FLOPs, never the memory at ep = 1.
TEST(MoeSimulate, RoutingSkewMovesFlopsNotMemory) {
  const Scenario balanced = tiny_moe({{"training", {{"steps", 2}}}});
  const Scenario skewed =
      tiny_moe({{"training", {{"steps", 2}, {"moe_routing", {{"hot_expert_factor", 1.5}}}}}});
  EXPECT_DOUBLE_EQ(skewed.model.moe.hot_expert_factor, 1.5);
  auto rows = [](const Scenario& s) {
    for (const OpCall& op : recorded_ops::record(s))
      if (op.kind == OpKind::kGroupedMM) return GroupedMmArgs::decode(op).computed_rows;
    return int64_t{-1};
  };
  EXPECT_EQ(rows(balanced), 4 * 32);     // 2 x 32 tokens x top-2 over 4 experts
  EXPECT_EQ(rows(skewed), 48 + 3 * 32);  // 48, then 27 / 27 / 26 padded to 32
  const auto rb = sim::simulate_scenario(balanced), rs = sim::simulate_scenario(skewed);
  EXPECT_TRUE(rs.problems.empty()) << fullshard::testing::problems_text(rs);
  EXPECT_EQ(rs.classes[0].peak_allocated_bytes, rb.classes[0].peak_allocated_bytes);
  EXPECT_EQ(rs.classes[0].peak_reserved_bytes, rb.classes[0].peak_reserved_bytes);
}

TEST(MoeChecks, CompositionsNotBuiltAreRefusedByName) {
  auto expect_refused = [](const json& j, const std::string& where) {
    try {
      parse_scenario(j);
      ADD_FAILURE() << "expected InputError at " << where;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), where) << e.what();
    }
  };
  expect_refused(recorded_ops::scenario_json("tiny-moe", nullptr, {1, 2}), "fsdp.mesh");
  expect_refused(recorded_ops::scenario_json("tiny-moe", json{{"compile", true}}, {2}),
                 "model.implementation.compile");
  expect_refused(recorded_ops::scenario_json("qwen3-30b-a3b", nullptr, {4, 2}), "fsdp.mesh");
  expect_refused(recorded_ops::scenario_json("tiny-llama", nullptr, {2},
                                             {{"training", {{"moe_routing", "balanced"}}}}),
                 "training.moe_routing");
  expect_refused(
      recorded_ops::scenario_json("tiny-moe", nullptr, {2},
                                  {{"training", {{"moe_routing", {{"hot_expert_factor", 0.5}}}}}}),
      "training.moe_routing.hot_expert_factor");
  expect_refused(recorded_ops::scenario_json("tiny-moe", nullptr, {2},
                                             {{"training", {{"moe_routing", "skewed"}}}}),
                 "training.moe_routing");
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json("mixtral-8x7b", nullptr, {8})));
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json("qwen3-30b-a3b", nullptr, {8})));
  // The auxiliary loss (NOTE [Auxiliary load-balancing loss]) where it is not built: sigmoid
  // scores, pipeline stages; with activation checkpointing it is.
  auto aux = [](const char* model) {
    return json{{"name", model},
                {"moe", {{"load_balance", "aux_loss"}, {"load_balance_coeff", 0.01}}}};
  };
  expect_refused(recorded_ops::scenario_json(aux("tiny-deepseek"), nullptr,
                                             {2}),
                 "model.moe.load_balance");
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json(
      aux("tiny-moe"), nullptr, {2}, {{"training", {{"activation_checkpointing", "full"}}}})));
  expect_refused(recorded_ops::scenario_json(
                     aux("tiny-moe"), nullptr, {2},
                     {{"pipeline_parallel", {{"schedule", "1F1B"}, {"microbatch_size", 1}}},
                      {"fsdp", {{"mesh", {{"shape", {2, 1}}, {"dim_names", {"pp", "dp_shard"}}}}}}}),
                 "pipeline_parallel");
  EXPECT_NO_THROW(
      parse_scenario(recorded_ops::scenario_json(aux("tiny-moe"), nullptr, {2})));
}

// DeepSeek's multi-head latent attention (NOTE [Multi-head latent attention]): tiny-deepseek's
// attention op takes q / k heads of 24 and v heads of 16 with torchtitan's scale, on the efficient
// kernel (flash needs one head size), with its FLOPs; the splits and concatenations are the
// layout ops they are; the block order is dense first, then MoE.
TEST(MlaOps, AttentionHasItsOwnVHeadSizeAndScale) {
  const Scenario s = parse_scenario(recorded_ops::scenario_json("tiny-deepseek", nullptr, {2}));
  const int64_t B = 2, S = 32, H = 4, qk = 24, vd = 16;
  std::map<OpKind, int> count;
  bool saw_attention = false, saw_backward = false;
  for (const OpCall& op : recorded_ops::record(s)) {
    validate_op_args(op);
    ++count[op.kind];
    if (op.kind == OpKind::kAttention) ADD_FAILURE() << "flash with v != qk: " << op.name;
    if (op.kind == OpKind::kAttentionEfficient || op.kind == OpKind::kAttentionEfficientBackward) {
      const AttentionArgs a = AttentionArgs::decode(op);
      EXPECT_EQ(a.head_dim, qk) << op.name;
      EXPECT_EQ(a.vd(), vd) << op.name;
      EXPECT_FLOAT_EQ(a.scale, static_cast<float>(1.0 / std::sqrt(24.0))) << op.name;
      EXPECT_FALSE(a.ring()) << op.name;
      const double fwd = static_cast<double>(B * H * S * S * (qk + vd));
      if (op.kind == OpKind::kAttentionEfficient) {
        saw_attention = true;
        EXPECT_DOUBLE_EQ(op.flops, fwd);
        EXPECT_EQ(op.outputs[0].meta.shape, (Shape{B, S, H, vd}));
      } else {
        saw_backward = true;
        // The causal half of QK^T, dQ, dK over qk's head size and dP, dV over v's.
        EXPECT_DOUBLE_EQ(op.flops, static_cast<double>(B * H * S * S * (3 * qk + 2 * vd)));
        EXPECT_EQ(op.outputs[2].meta.shape, (Shape{B, S, H * vd}));  // dv
      }
    }
  }
  EXPECT_TRUE(saw_attention && saw_backward);
  // Per layer (2): three splits of two copies; the q and k concatenations forward, the splits'
  // concatenations backward; the cat backward's two column copies each.
  EXPECT_EQ(count[OpKind::kNarrowCopy], 2 * (3 * 2 + 2 * 2));
  EXPECT_EQ(count[OpKind::kRepeatKV], 2);
  Transformer t(s.model);
  bool dense0 = false, moe1 = false;
  t.root().for_each_param([&](Param& p) {
    dense0 = dense0 || p.fqn == "layers.0.feed_forward.w1.weight";
    moe1 = moe1 || p.fqn == "layers.1.moe.experts.w1";
  });
  EXPECT_TRUE(dense0 && moe1);
}

TEST(MlaChecks, CompositionsNotBuiltAreRefusedByName) {
  auto expect_refused = [](const json& j, const std::string& where) {
    try {
      parse_scenario(j);
      ADD_FAILURE() << "expected InputError at " << where;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), where) << e.what();
    }
  };
  expect_refused(recorded_ops::scenario_json("tiny-deepseek", json{{"rope", "rotate_half"}}, {2}),
                 "model.implementation.rope");
  expect_refused(recorded_ops::scenario_json("tiny-deepseek", nullptr, {1, 2}), "fsdp.mesh");
  // The published sizes carry the expert bias (and the 671B groups): built (NOTE [Expert bias]
  // in core/model/expert_bias.h), with pipeline stages too; bad groups name their field.
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json(
                     "deepseek-v3-16b", nullptr, {2, 4},
                     json{{"fsdp", {{"mesh", {{"shape", {2, 4}}, {"dim_names", {"pp", "dp_shard"}}}}}},
                          {"pipeline_parallel", {{"schedule", "1F1B"}, {"microbatch_size", 1}}}})));
  expect_refused(recorded_ops::scenario_json(
                     json{{"name", "deepseek-v3-671b"}, {"moe", {{"num_expert_groups", 3}}}},
                     nullptr, {8}),
                 "model.moe.num_expert_groups");
  expect_refused(recorded_ops::scenario_json(
                     json{{"name", "deepseek-v3-671b"}, {"moe", {{"num_limited_groups", 0}}}},
                     nullptr, {8}),
                 "model.moe.num_limited_groups");
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json("deepseek-v3-16b", nullptr, {8})));
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json("deepseek-v3-671b", nullptr, {8})));
  // Restating the 671B's 8 groups keeps its limit of 4; fewer groups than the limit lift it; a
  // model without groups that gets some has no limit.
  const auto groups = [](const json& model) {
    const MoeConfig& m = parse_scenario(recorded_ops::scenario_json(model, nullptr, {8})).model.moe;
    return std::pair<int64_t, int64_t>{m.num_expert_groups, m.num_limited_groups};
  };
  using G = std::pair<int64_t, int64_t>;
  EXPECT_EQ(groups(json{{"name", "deepseek-v3-671b"}, {"moe", {{"num_expert_groups", 8}}}}),
            G(8, 4));
  EXPECT_EQ(groups(json{{"name", "deepseek-v3-671b"}, {"moe", {{"num_expert_groups", 2}}}}),
            G(2, 2));
  EXPECT_EQ(groups(json{{"name", "deepseek-v3-16b"}, {"moe", {{"num_expert_groups", 4}}}}),
            G(4, 4));
  EXPECT_NO_THROW(parse_scenario(recorded_ops::scenario_json(
      json{{"name", "deepseek-v3-16b"}, {"moe", {{"load_balance", "none"}}}}, nullptr, {8})));
}

}  // namespace
}  // namespace fullshard

namespace fullshard {
namespace {

// NOTE [Expert bias] (core/model/expert_bias.h): the shipped DeepSeek-V3 16B run with the bias
// holds exactly its two fp32 [64] buffers per MoE layer more than without it, each one 512-byte
// block: 26 MoE layers (27 less the dense first) x 2 x 512 B at the peak.
TEST(SimMoe, ExpertBiasBuffersAreTheWholePeakDifferenceOfDeepSeek16B) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/deepseek-v3-16b-ep8-h100.json");
  json j = json::parse(in);
  j.erase("$schema");
  ASSERT_EQ(j["model"], "deepseek-v3-16b");
  const Scenario with = parse_scenario(j);
  ASSERT_EQ(with.model.moe.load_balance, MoeLoadBalance::kExpertBias);
  ASSERT_EQ(with.model.moe.moe_layer_count(with.model.n_layers), 26);
  j["model"] = {{"name", "deepseek-v3-16b"}, {"moe", {{"load_balance", "none"}}}};
  const auto a = sim::simulate_scenario(with), b = sim::simulate_scenario(parse_scenario(j));
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (size_t i = 0; i < a.classes.size(); ++i)
    EXPECT_EQ(a.classes[i].peak_allocated_bytes, b.classes[i].peak_allocated_bytes + 26 * 2 * 512)
        << i;
}

}  // namespace
}  // namespace fullshard
