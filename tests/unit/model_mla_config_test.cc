// DeepSeek-V3 model configs (core/model/mla_config.h, docs/models.md): multi-head latent
// attention's parameters and softmax scale, the zoo's exact counts, the module tree against them,
// Hugging Face import of deepseek_v3 with every field mapped or refused by name, and validation.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/model/model_config.h"
#include "core/model/model_flops.h"
#include "core/model/transformer.h"

namespace fullshard {
namespace {

using nlohmann::json;

json hf(const std::string& file) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/hf/" + file);
  return json::parse(in);
}

ModelConfig zoo(const std::string& name) {
  auto m = find_model(name);
  if (!m) throw std::runtime_error("not in the zoo: " + name);
  return *m;
}

template <class F>
void expect_error(F&& f, const std::string& where, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected InputError at " << where;
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), where) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

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

// The published totals: DeepSeek-V3's main model (without the MTP layer, which torchtitan does
// not train, and without the expert bias, a buffer) and torchtitan's 16B flavour.
TEST(MlaCount, ZooMatchesThePublishedCounts) {
  EXPECT_EQ(parameter_count(zoo("deepseek-v3-671b")), 671'026'404'352);
  EXPECT_EQ(parameter_count(zoo("deepseek-v3-16b")), 15'706'484'224);
}

// Every term of tiny-deepseek, as sum(p.numel()) over torchtitan's module tree counts it.
TEST(MlaCount, TinyDeepseekBreakdown) {
  const ModelConfig c = zoo("tiny-deepseek");
  const int64_t D = 64, H = 4, qr = 32, kvr = 32, nope = 16, rope = 8, vd = 16, V = 256;
  const int64_t attn = D * qr + qr /* wq_a, q_norm */ + qr * H * (nope + rope) /* wq_b */ +
                       D * (kvr + rope) + kvr /* wkv_a, kv_norm */ +
                       kvr * H * (nope + vd) /* wkv_b */ + H * vd * D /* wo */;
  const int64_t dense = 3 * D * 128, moe = D * 4 + 4 * 3 * D * 32 + 3 * D * 32;
  EXPECT_EQ(parameter_count(c), 2 * (attn + 2 * D) + dense + moe + 2 * V * D + D);
  EXPECT_EQ(parameter_count(c), 120'512);
  EXPECT_EQ(module_tree_params(c), parameter_count(c));
  Transformer t(c);
  Module& a = t.root().child("layers").child("0").child("attention");
  EXPECT_EQ(a.child("wkv_a").param("weight").shape, (Shape{kvr + rope, D}));
  EXPECT_EQ(a.child("wkv_b").param("weight").shape, (Shape{H * (nope + vd), kvr}));
  EXPECT_EQ(a.child("wo").param("weight").shape, (Shape{D, H * vd}));
  EXPECT_EQ(t.root().child("layers").child("1").child("moe").child("experts").param("w1").shape,
            (Shape{4, 32, D}));
}

TEST(MlaCount, ModuleTreeIsTheCountAtScale) {
  for (const char* name : {"deepseek-v3-16b"}) {
    const ModelConfig c = zoo(name);
    EXPECT_EQ(module_tree_params(c), parameter_count(c)) << name;
  }
  ModelConfig c = zoo("deepseek-v3-671b");
  c.n_layers = 5;  // the 671B's tree is 61 layers of the same: five of them (3 dense, 2 MoE)
  EXPECT_EQ(module_tree_params(c), parameter_count(c));
}

// torchtitan's Attention.softmax_scale: qk_head_dim^-0.5, times mscale^2 under YaRN.
TEST(MlaScale, SoftmaxScaleAsTorchtitan) {
  const double base = 1.0 / std::sqrt(192.0);
  const double m671 = 0.1 * 1.0 * std::log(40.0) + 1.0, m16 = 0.1 * 0.70 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(zoo("deepseek-v3-671b").mla.softmax_scale(), base * m671 * m671);
  EXPECT_DOUBLE_EQ(zoo("deepseek-v3-16b").mla.softmax_scale(), base * m16 * m16);
  EXPECT_DOUBLE_EQ(zoo("tiny-deepseek").mla.softmax_scale(), 1.0 / std::sqrt(24.0));
}

// YaRN (NOTE [YaRN RoPE] in core/runtime/rope_args.h) on DeepSeek-V3's rope head of 64 (theta
// 1e4, factor 40, beta 32 / 1, original 4096): pairs below 10 keep their frequency, pairs from 23
// on are divided by 40, the ones between interpolate. Expected values: torchtitan's
// precompute_freqs_cis re-done in Python with fp32 rounding (correction range 10.47 -> 10, 22.51 ->
// 23).
TEST(MlaRope, YarnFrequenciesAsTorchtitan) {
  const ModelConfig c = zoo("deepseek-v3-671b");
  ASSERT_TRUE(c.rope_scaling.yarn);
  const auto inv = rope_inv_freq(c.rope(), c.mla.qk_rope_head_dim);
  ASSERT_EQ(inv.size(), 32u);
  const std::pair<int, double> want[] = {{0, 1.0},
                                         {5, 0.23713736236095428},
                                         {10, 0.05623412877321243},
                                         {11, 0.03900692546740175},
                                         {15, 0.008334509329870343},
                                         {20, 0.0007905694656074046},
                                         {23, 3.333803615532815e-05},
                                         {24, 2.5000001187436283e-05},
                                         {31, 3.3338037610519677e-06}};
  for (const auto& [i, w] : want) EXPECT_NEAR(inv[static_cast<size_t>(i)], w, 1e-6 * w) << i;
  // The op carries it: fargs round-trip to the same frequencies.
  const RopeParams back = RopeParams::from_fargs(c.rope().fargs());
  EXPECT_EQ(rope_inv_freq(back, 64), inv);
  const ModelConfig hf_c = model_from_hf_config(hf("deepseek-v3.json"), "config.json");
  EXPECT_EQ(rope_inv_freq(hf_c.rope(), 64), inv);
  ModelConfig bad = c;
  bad.rope_scaling = RopeScaling{};  // the softmax factor without YaRN's frequencies
  expect_error([&] { validate_model(bad, "model"); }, "model.mla.rope_factor", "YaRN");
}

// MFU's attention term uses torchtitan's head_dims = nope + rope + v for MLA.
TEST(MlaCount, ModelFlopsUseQkPlusVHeadDims) {
  const ModelConfig c = zoo("deepseek-v3-16b");
  const double embed = 102400.0 * 2048;
  EXPECT_DOUBLE_EQ(model_flops_per_token(c, 4096),
                   6.0 * (static_cast<double>(active_parameter_count(c)) - embed) +
                       6.0 * 27 * 16 * (128 + 64 + 128) * 4096);
}

RC_GTEST_PROP(MlaCountProperty, AttentionTermsAreLinearInTheRanks, ()) {
  ModelConfig c = zoo("tiny-deepseek");
  MlaConfig& m = c.mla;
  m.q_lora_rank = *rc::gen::element<int64_t>(0, 8, 32);
  m.kv_lora_rank = *rc::gen::inRange<int64_t>(1, 64);
  m.qk_nope_head_dim = *rc::gen::inRange<int64_t>(1, 32);
  m.qk_rope_head_dim = 2 * *rc::gen::inRange<int64_t>(1, 8);
  m.v_head_dim = *rc::gen::inRange<int64_t>(1, 32);
  validate_model(c, "model");
  const int64_t base = parameter_count(c), L = c.n_layers, H = c.n_heads, D = c.dim;
  RC_ASSERT(module_tree_params(c) == base);
  ModelConfig more = c;
  more.mla.kv_lora_rank += 1;  // a wkv_a row, a kv_norm weight, a wkv_b column per head
  RC_ASSERT(parameter_count(more) - base == L * (D + 1 + H * (m.qk_nope_head_dim + m.v_head_dim)));
  more = c;
  more.mla.v_head_dim += 1;  // a wkv_b row and a wo column per head
  RC_ASSERT(parameter_count(more) - base == L * H * (m.kv_lora_rank + D));
}

// ---------------------------------------------------------------- Hugging Face import
TEST(MlaHfImport, DeepseekV3MatchesTheZoo) {
  const ModelConfig got = model_from_hf_config(hf("deepseek-v3.json"), "config.json");
  const ModelConfig want = zoo("deepseek-v3-671b");
  EXPECT_EQ(got.name, "deepseek_v3");
  EXPECT_EQ(parameter_count(got), parameter_count(want));
  EXPECT_EQ(got.mla.q_lora_rank, 1536);
  EXPECT_EQ(got.mla.kv_lora_rank, 512);
  EXPECT_EQ(got.mla.qk_rope_head_dim, 64);
  EXPECT_DOUBLE_EQ(got.mla.softmax_scale(), want.mla.softmax_scale());
  EXPECT_EQ(got.moe.first_dense_layers, 3);
  EXPECT_EQ(got.moe.num_experts, 256);
  EXPECT_EQ(got.moe.shared_expert_dim, 2048);
  EXPECT_EQ(got.moe.top_k, 8);
  EXPECT_EQ(got.moe.score_func, MoeScoreFunc::kSigmoid);
  EXPECT_TRUE(got.moe.route_norm);
  EXPECT_DOUBLE_EQ(got.moe.route_scale, 2.5);
  EXPECT_EQ(got.moe.load_balance, MoeLoadBalance::kExpertBias);
  EXPECT_EQ(got.moe.num_expert_groups, 8);
  EXPECT_EQ(got.moe.num_limited_groups, 4);
  EXPECT_EQ(got.n_kv_heads, 128);
}

TEST(MlaHfImport, LiteStyleConfigsMapQWithoutLoraAndGreedyRouting) {
  json j = hf("deepseek-v3.json");
  j["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite: q = wq(x)
  j["topk_method"] = "greedy";
  j["scoring_func"] = "softmax";
  j.erase("rope_scaling");
  const ModelConfig c = model_from_hf_config(j, "config.json");
  EXPECT_EQ(c.mla.q_lora_rank, 0);
  EXPECT_EQ(c.moe.load_balance, MoeLoadBalance::kNone);
  EXPECT_EQ(c.moe.num_expert_groups, 1);
  EXPECT_EQ(c.moe.score_func, MoeScoreFunc::kSoftmax);
  EXPECT_DOUBLE_EQ(c.mla.softmax_scale(), 1.0 / std::sqrt(192.0));
}

// An absent field takes DeepseekV3Config's default (transformers), not "off"; transformers 5.x
// writes the YaRN object as rope_parameters.
TEST(MlaHfImport, AbsentFieldsTakeTransformersDefaults) {
  json j = hf("deepseek-v3.json");
  for (const char* k : {"q_lora_rank", "n_shared_experts", "first_k_dense_replace",
                        "routed_scaling_factor", "n_group", "topk_group"})
    j.erase(k);
  j["rope_parameters"] = j["rope_scaling"];
  j.erase("rope_scaling");
  const ModelConfig c = model_from_hf_config(j, "config.json");
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.moe.shared_expert_dim, 2048);
  EXPECT_EQ(c.moe.first_dense_layers, 3);
  EXPECT_DOUBLE_EQ(c.moe.route_scale, 2.5);
  EXPECT_EQ(c.moe.num_expert_groups, 8);
  EXPECT_EQ(c.moe.num_limited_groups, 4);
  EXPECT_TRUE(c.rope_scaling.yarn);
  EXPECT_DOUBLE_EQ(c.mla.softmax_scale(), zoo("deepseek-v3-671b").mla.softmax_scale());
  EXPECT_EQ(parameter_count(c), parameter_count(zoo("deepseek-v3-671b")));
  j["n_shared_experts"] = nullptr;
  EXPECT_EQ(model_from_hf_config(j, "config.json").moe.shared_expert_dim, 0);
}

// With YaRN, HF scales cos / sin unless both mscales are set, non-zero and equal; that scale and
// the keys that change it are refused by name rather than dropped.
TEST(MlaHfImport, YarnSettingsThatScaleCosSinAreRefused) {
  const auto refused = [](const std::function<void(json&)>& edit, const std::string& where,
                          const std::string& needle) {
    json j = hf("deepseek-v3.json");
    edit(j["rope_scaling"]);
    expect_error([&] { model_from_hf_config(j, "config.json"); }, where, needle);
  };
  refused([](json& y) { y.erase("mscale_all_dim"); }, "config.json: rope_scaling.mscale_all_dim",
          "missing");
  refused([](json& y) { y["mscale_all_dim"] = 0; }, "config.json: rope_scaling.mscale_all_dim",
          "is 0");
  refused([](json& y) { y.erase("mscale"); }, "config.json: rope_scaling.mscale", "missing");
  refused([](json& y) { y["attention_factor"] = 1.2; },
          "config.json: rope_scaling.attention_factor", "not modelled");
  refused([](json& y) { y["truncate"] = false; }, "config.json: rope_scaling.truncate",
          "not modelled");
}

TEST(MlaHfImport, FieldsNotModelledAreRefusedByName) {
  const auto refused = [](const char* key, const json& value, const std::string& where,
                          const std::string& needle) {
    json j = hf("deepseek-v3.json");
    j[key] = value;
    expect_error([&] { model_from_hf_config(j, "config.json"); }, where, needle);
  };
  refused("hidden_act", "gelu", "config.json: hidden_act", "does not model");
  refused("moe_layer_freq", 2, "config.json: moe_layer_freq", "does not model");
  refused("attention_bias", true, "config.json: attention_bias", "does not model");
  refused("rope_interleave", false, "config.json: rope_interleave", "does not model");
  refused("topk_method", "aux_free", "config.json: topk_method", "does not model");
  // DeepSeek's reference scores a group by its best expert without the bias; torchtitan's
  // router (the one built) sums the top two.
  refused("topk_method", "group_limited_greedy", "config.json: topk_method", "top two");
  refused("scoring_func", "relu", "config.json: scoring_func", "does not model");
  refused("num_key_value_heads", 8, "config.json: num_key_value_heads", "every head");
  refused("num_experts_per_tok", 300, "config.json: num_experts_per_tok", "above the 256");
  refused("first_k_dense_replace", 62, "config.json: first_k_dense_replace", "0 to");
  json j = hf("deepseek-v3.json");
  j["rope_scaling"]["mscale"] = 0.707;
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: rope_scaling.mscale",
               "ratio");
  j = hf("deepseek-v3.json");
  j["rope_scaling"]["type"] = "dynamic";
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: rope_scaling.type",
               "yarn");
  j = hf("deepseek-v3.json");
  j.erase("n_routed_experts");
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: n_routed_experts",
               "missing");
  j = hf("deepseek-v3.json");
  j["n_group"] = 7;  // 256 experts do not split into 7 groups
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: n_group",
               "does not divide");
  j = hf("deepseek-v3.json");
  j["topk_group"] = 9;
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: topk_group",
               "above n_group");
}

TEST(MlaValidate, RangesNameTheField) {
  ModelConfig c = zoo("tiny-deepseek");
  c.mla.qk_rope_head_dim = 3;
  expect_error([&] { validate_model(c, "model"); }, "model.mla.qk_rope_head_dim", "even");
  c = zoo("tiny-deepseek");
  c.mla.v_head_dim = 0;
  expect_error([&] { validate_model(c, "model"); }, "model.mla.v_head_dim", ">= 1");
  c = zoo("tiny-deepseek");
  c.n_kv_heads = 2;
  expect_error([&] { validate_model(c, "model"); }, "model.n_kv_heads", "every head");
  c = zoo("tiny-deepseek");
  c.qk_norm = true;
  expect_error([&] { validate_model(c, "model"); }, "model.mla", "replaces the whole attention");
  c = zoo("tiny-deepseek");
  c.moe.num_limited_groups = 2;  // above 1 group
  expect_error([&] { validate_model(c, "model"); }, "model.moe.num_limited_groups",
               "1 to num_expert_groups");
}

}  // namespace
}  // namespace fullshard
