// Mixture-of-experts model configs: MoE layer layout, exact parameter counts, Hugging Face
// import of mixtral / qwen3_moe / qwen2_moe and validation of the MoE fields.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/model/model_config.h"
#include "core/model/model_flops.h"

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

// The InputError's where() and that the message names `needle`.
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

TEST(MoeLayers, InterleaveDenseFirstAndDenseList) {
  MoeConfig m;
  m.num_experts = 4;
  m.top_k = 1;
  m.expert_dim = 8;
  EXPECT_EQ(m.moe_layer_count(6), 6);
  m.first_dense_layers = 1;  // DeepSeek-V3's first_k_dense_replace
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_EQ(m.moe_layer_count(6), 5);
  m.first_dense_layers = 0;
  m.interleave_step = 2;  // Qwen decoder_sparse_step / Llama 4: layers 1, 3, 5
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_EQ(m.moe_layer_count(6), 3);
  m.dense_layers = {3};  // Qwen mlp_only_layers
  EXPECT_FALSE(m.is_moe_layer(3));
  EXPECT_EQ(m.moe_layer_count(6), 2);
  EXPECT_EQ(MoeConfig{}.moe_layer_count(6), 0);  // dense
}

// Every term of tiny-moe, as sum(p.numel()) over torchtitan's MoE module tree counts it.
TEST(MoeCount, TinyMoeBreakdown) {
  const ModelConfig c = zoo("tiny-moe");
  const int64_t D = 64, kv = 2 * 16, E = 4, Fe = 32, Fs = 32, V = 256, L = 2;
  const int64_t attn = 2 * D * D + 2 * D * kv, norms = 2 * D;
  const int64_t moe = D * E /* router.gate */ + E * 3 * D * Fe /* experts.w1/w2/w3 */ +
                      3 * D * Fs /* shared_experts */;
  EXPECT_EQ(parameter_count(c), L * (attn + norms + moe) + 2 * V * D + D);
  EXPECT_EQ(parameter_count(c), 119'616);
}

TEST(MoeCount, Qwen3DecoupledHeadsAndQkNorms) {
  ModelConfig c = zoo("qwen3-30b-a3b");
  EXPECT_EQ(c.head_dim(), 128);
  const int64_t full = parameter_count(c);
  c.qk_norm = false;
  EXPECT_EQ(full - parameter_count(c), 48 * 2 * 128);
  c.qk_norm = true;
  c.explicit_head_dim = 0;  // head 64: q and o shrink by half
  EXPECT_EQ(full - parameter_count(c), 48 * (2 * 2048 * 2048 + 2 * 2048 * 4 * 64 + 2 * 64));
}

TEST(MoeCount, DenseLayersUseTheDenseFfn) {
  ModelConfig c = zoo("mixtral-8x7b");
  const int64_t all_moe = parameter_count(c);
  c.moe.first_dense_layers = 1;
  const int64_t D = 4096, F = 14336, E = 8;
  EXPECT_EQ(all_moe - parameter_count(c), E * 3 * D * F + D * E - 3 * D * F);
}

// MFU counts the parameters a token runs through: Mixtral's published 12.9B active.
TEST(MoeCount, ActiveParametersAndModelFlops) {
  const ModelConfig mixtral = zoo("mixtral-8x7b");
  EXPECT_EQ(active_parameter_count(mixtral), 12'879'925'248);
  const double embed = 32000.0 * 4096;
  EXPECT_DOUBLE_EQ(model_flops_per_token(mixtral, 4096),
                   6.0 * (12'879'925'248 - embed) + 12.0 * 32 * 32 * 128 * 4096);
  ModelConfig dense = zoo("tiny-moe");
  dense.moe = MoeConfig{};
  EXPECT_EQ(active_parameter_count(dense), parameter_count(dense));
}

RC_GTEST_PROP(MoeCountProperty, AffineInExpertsAndSharedSize, ()) {
  ModelConfig c = zoo("tiny-moe");
  c.moe.num_experts = *rc::gen::inRange<int64_t>(1, 64);
  c.moe.top_k = *rc::gen::inRange<int64_t>(1, c.moe.num_experts + 1);
  c.moe.expert_dim = *rc::gen::inRange<int64_t>(1, 256);
  c.moe.shared_expert_dim = *rc::gen::inRange<int64_t>(0, 256);
  c.moe.interleave_step = *rc::gen::inRange<int64_t>(1, 3);
  validate_model(c, "model");
  const int64_t n_moe = c.moe.moe_layer_count(c.n_layers);
  const int64_t base = parameter_count(c);
  ModelConfig more = c;
  more.moe.num_experts += 1;  // one more expert: its w1/w2/w3 and a router row per MoE layer
  RC_ASSERT(parameter_count(more) - base == n_moe * (3 * c.dim * c.moe.expert_dim + c.dim));
  more = c;
  more.moe.shared_expert_dim += 1;
  RC_ASSERT(parameter_count(more) - base == n_moe * 3 * c.dim);
  RC_ASSERT(c.moe.top_k <= c.moe.num_experts);  // top_k never changes the count
  more = c;
  more.moe.top_k = 1;
  RC_ASSERT(parameter_count(more) == base);
}

// ---------------------------------------------------------------- Hugging Face import
TEST(MoeHfImport, MixtralMatchesTheZoo) {
  const ModelConfig got = model_from_hf_config(hf("mixtral-8x7b.json"), "config.json");
  const ModelConfig want = zoo("mixtral-8x7b");
  EXPECT_EQ(got.name, "mixtral");
  EXPECT_EQ(parameter_count(got), 46'702'792'704);
  EXPECT_EQ(got.moe.num_experts, want.moe.num_experts);
  EXPECT_EQ(got.moe.top_k, 2);
  EXPECT_EQ(got.moe.expert_dim, 14336);
  EXPECT_TRUE(got.moe.route_norm);
  EXPECT_EQ(got.moe.score_func, MoeScoreFunc::kSoftmax);
  EXPECT_EQ(got.moe.load_balance, MoeLoadBalance::kNone);  // output_router_logits false
  EXPECT_EQ(got.rope_theta, want.rope_theta);
}

TEST(MoeHfImport, Qwen3MoeMatchesTheZoo) {
  const ModelConfig got = model_from_hf_config(hf("qwen3-30b-a3b.json"), "config.json");
  EXPECT_EQ(got.name, "qwen3_moe");
  EXPECT_EQ(parameter_count(got), 30'532'122'624);
  EXPECT_EQ(got.head_dim(), 128);
  EXPECT_TRUE(got.qk_norm);
  EXPECT_EQ(got.moe.num_experts, 128);
  EXPECT_EQ(got.moe.top_k, 8);
  EXPECT_EQ(got.moe.expert_dim, 768);
  EXPECT_TRUE(got.moe.route_norm);
  EXPECT_EQ(got.ffn_dim, 6144);  // mlp_only_layers would use it
}

TEST(MoeHfImport, Qwen2MoeHasAGatedSharedExpertAndQkvBias) {
  const ModelConfig got = model_from_hf_config(hf("qwen1.5-moe-a2.7b.json"), "config.json");
  EXPECT_EQ(got.name, "qwen2_moe");
  EXPECT_TRUE(got.qkv_bias);
  EXPECT_FALSE(got.moe.route_norm);  // norm_topk_prob false
  EXPECT_EQ(got.moe.shared_expert_dim, 5632);
  EXPECT_TRUE(got.moe.shared_expert_gate);
  const int64_t D = 2048, V = 151936, E = 60, Fe = 1408, Fs = 5632, L = 24;
  const int64_t layer = 4 * D * D + 3 * D /* q/k/v bias */ + 2 * D /* norms */ + D * E +
                        E * 3 * D * Fe + 3 * D * Fs + D /* shared_expert_gate */;
  EXPECT_EQ(parameter_count(got), L * layer + 2 * V * D + D);  // 14.3B as published
}

TEST(MoeHfImport, LayoutAuxLossAndDenseLayersAreMapped) {
  json j = hf("qwen3-30b-a3b.json");
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {1, 5};
  j["output_router_logits"] = true;
  const ModelConfig c = model_from_hf_config(j, "config.json");
  EXPECT_EQ(c.moe.interleave_step, 2);
  EXPECT_EQ(c.moe.dense_layers, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(c.moe.moe_layer_count(48), 22);  // 24 odd layers, less 1 and 5
  EXPECT_EQ(c.moe.load_balance, MoeLoadBalance::kAuxLoss);
  EXPECT_DOUBLE_EQ(c.moe.load_balance_coeff, 0.001);
}

TEST(MoeHfImport, FieldsNotModelledAreRefusedByName) {
  json j = hf("mixtral-8x7b.json");
  j["router_jitter_noise"] = 0.1;
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: router_jitter_noise",
               "does not model");
  j = hf("mixtral-8x7b.json");
  j["num_experts_per_tok"] = 9;
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: num_experts_per_tok",
               "above the 8 experts");
  j = hf("qwen3-30b-a3b.json");
  j.erase("moe_intermediate_size");
  expect_error([&] { model_from_hf_config(j, "config.json"); },
               "config.json: moe_intermediate_size", "missing");
  j = hf("qwen3-30b-a3b.json");
  j["routed_scaling_factor"] = 2.5;
  expect_error([&] { model_from_hf_config(j, "config.json"); },
               "config.json: routed_scaling_factor", "no such field");
  j = hf("qwen3-30b-a3b.json");
  j["mlp_only_layers"] = {48};
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: mlp_only_layers",
               "48");
  j = hf("qwen3-30b-a3b.json");
  j["attention_bias"] = true;
  expect_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: attention_bias",
               "not supported");
}

TEST(MoeValidate, RangesNameTheField) {
  ModelConfig c = zoo("tiny-moe");
  c.moe.top_k = 5;
  expect_error([&] { validate_model(c, "model"); }, "model.moe.top_k", "1 to num_experts (4)");
  c = zoo("tiny-moe");
  c.moe.expert_dim = 0;
  expect_error([&] { validate_model(c, "model"); }, "model.moe.expert_dim", ">= 1");
  c = zoo("tiny-moe");
  c.moe.first_dense_layers = 3;
  expect_error([&] { validate_model(c, "model"); }, "model.moe.first_dense_layers",
               "0 to n_layers");
  c = zoo("tiny-moe");
  c.moe.route_scale = 0;
  expect_error([&] { validate_model(c, "model"); }, "model.moe.route_scale", "positive");
  c = zoo("tiny-gpt2");
  c.moe = zoo("tiny-moe").moe;
  expect_error([&] { validate_model(c, "model"); }, "model.moe", "GPT-2");
}

}  // namespace
}  // namespace fullshard

namespace fullshard {
namespace {

// The closed form counts what is_moe_layer says, for any layout, and stays O(dense_layers) for
// the absurd layer counts a scenario may give before the limits refuse it.
RC_GTEST_PROP(MoeConfigProp, LayerCountCountsTheMoeLayers, ()) {
  MoeConfig m;
  m.num_experts = *rc::gen::inRange(0, 5);
  m.first_dense_layers = *rc::gen::inRange(0, 6);
  m.interleave_step = *rc::gen::inRange(1, 5);
  m.dense_layers = *rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(0, 30));
  const int64_t n = *rc::gen::inRange(0, 25);
  int64_t loop = 0;
  for (int64_t i = 0; i < n; ++i) loop += m.is_moe_layer(i) ? 1 : 0;
  RC_ASSERT(m.moe_layer_count(n) == loop);
  if (m.enabled()) RC_ASSERT(m.moe_layer_count(int64_t{1} << 40) > 0);
}

}  // namespace
}  // namespace fullshard
