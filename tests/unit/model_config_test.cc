// Model zoo, exact parameter counts, Hugging Face config.json import and validation.
#include "core/model/model_config.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/common/error.h"

namespace fullshard {
namespace {

using nlohmann::json;

std::string hf_data(const std::string& file) {
  return std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/hf/" + file;
}

ModelConfig zoo_model(const std::string& name) {
  const auto m = find_model(name);
  if (!m) throw std::runtime_error("not in the zoo: " + name);
  return *m;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Runs `f`, expecting an InputError whose where() is `where` and whose message contains
// every string in `needles`.
template <class F>
void expect_input_error(F&& f, const std::string& where,
                        std::initializer_list<std::string> needles = {}) {
  try {
    f();
    ADD_FAILURE() << "expected InputError at " << where;
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), where) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "'" << n << "' not in: " << e.what();
  }
}

// ---------------------------------------------------------------- published counts
struct Published {
  const char* name;
  int64_t params;
};

// Published parameter counts (sum of numel over model.parameters(), tied weights once).
// The tiny ones are computed by hand in TinyLlamaBreakdown / TinyGpt2Breakdown (tiny-moe in
// model_moe_config_test.cc's TinyMoeBreakdown).
// clang-format off
constexpr Published kPublished[] = {
    {"gpt2-124m", 124'439'808},       {"gpt2-355m", 354'823'168},
    {"gpt2-774m", 774'030'080},       {"gpt2-1.5b", 1'557'611'200},
    {"llama2-7b", 6'738'415'616},     {"llama2-13b", 13'015'864'320},
    {"llama2-70b", 68'976'648'192},   {"llama3.1-8b", 8'030'261'248},
    {"llama3.1-70b", 70'553'706'496}, {"llama3.1-405b", 405'853'388'800},
    {"mistral-7b", 7'248'023'552},    {"mistral-7b-v0.1", 7'241'732'096},
    {"qwen2.5-7b", 7'615'616'512},    {"qwen2.5-14b", 14'770'033'664},
    {"tiny-llama", 106'816},          {"tiny-gpt2", 124'672},
    {"mixtral-8x7b", 46'702'792'704}, {"qwen3-30b-a3b", 30'532'122'624},
    {"tiny-moe", 119'616},
    {"deepseek-v3-671b", 671'026'404'352}, {"deepseek-v3-16b", 15'706'484'224},
    {"tiny-deepseek", 120'512},
};
// clang-format on

class ZooCount : public testing::TestWithParam<Published> {};

TEST_P(ZooCount, MatchesPublished) {
  EXPECT_EQ(parameter_count(zoo_model(GetParam().name)), GetParam().params);
}

std::string param_name(const testing::TestParamInfo<Published>& info) {
  std::string s = info.param.name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooCount, testing::ValuesIn(kPublished), param_name);

TEST(ModelZoo, EveryEntryHasAPublishedCount) {
  std::set<std::string> published;
  for (const auto& p : kPublished) published.insert(p.name);
  for (const auto& m : model_zoo()) EXPECT_TRUE(published.count(m.name)) << m.name;
  EXPECT_EQ(published.size(), model_zoo().size());
}

TEST(ModelZoo, EntriesAreValidUniqueLowerCaseAndFindable) {
  std::set<std::string> names;
  for (const auto& m : model_zoo()) {
    EXPECT_TRUE(names.insert(m.name).second) << "duplicate " << m.name;
    for (char c : m.name) EXPECT_FALSE(std::isupper(static_cast<unsigned char>(c))) << m.name;
    EXPECT_NO_THROW(validate_model(m, "model")) << m.name;
    const auto found = find_model(m.name);
    ASSERT_TRUE(found.has_value()) << m.name;
    EXPECT_EQ(found->name, m.name);
  }
}

TEST(ModelZoo, PublishedArchitectures) {
  const auto l405 = zoo_model("llama3.1-405b");
  EXPECT_EQ(l405.arch, ModelArch::kLlama);
  EXPECT_EQ(l405.vocab_size, 128256);
  EXPECT_EQ(l405.dim, 16384);
  EXPECT_EQ(l405.n_layers, 126);
  EXPECT_EQ(l405.n_heads, 128);
  EXPECT_EQ(l405.n_kv_heads, 8);
  EXPECT_EQ(l405.ffn_dim, 53248);
  EXPECT_EQ(l405.max_seq_len, 131072);
  EXPECT_EQ(l405.rope_theta, 500000.0);
  EXPECT_FALSE(l405.tie_embeddings);

  const auto mistral = zoo_model("mistral-7b");  // v0.3
  EXPECT_EQ(mistral.vocab_size, 32768);
  EXPECT_EQ(mistral.rope_theta, 1e6);
  EXPECT_EQ(zoo_model("mistral-7b-v0.1").vocab_size, 32000);

  for (const char* name : {"qwen2.5-7b", "qwen2.5-14b"}) {
    const auto q = zoo_model(name);
    EXPECT_TRUE(q.qkv_bias) << name;
    EXPECT_FALSE(q.linear_bias) << name;
    EXPECT_FALSE(q.tie_embeddings) << name;  // only Qwen2.5 <= 3B ties
  }
  EXPECT_EQ(zoo_model("qwen2.5-7b").norm_eps, 1e-6);
  EXPECT_EQ(zoo_model("qwen2.5-14b").norm_eps, 1e-5);

  const auto gpt2 = zoo_model("gpt2-1.5b");
  EXPECT_EQ(gpt2.arch, ModelArch::kGpt2);
  EXPECT_EQ(gpt2.n_heads, 25);
  EXPECT_EQ(gpt2.n_kv_heads, 25);
  EXPECT_EQ(gpt2.ffn_dim, 4 * 1600);
  EXPECT_EQ(gpt2.max_seq_len, 1024);
  EXPECT_TRUE(gpt2.tie_embeddings);
  EXPECT_TRUE(gpt2.linear_bias);
}

TEST(ModelZoo, FindModelIgnoresCaseAndKnowsHfNames) {
  EXPECT_EQ(find_model("Llama3.1-8B")->name, "llama3.1-8b");
  EXPECT_EQ(find_model("gpt2")->name, "gpt2-124m");
  EXPECT_EQ(find_model("gpt2-medium")->name, "gpt2-355m");
  EXPECT_EQ(find_model("gpt2-large")->name, "gpt2-774m");
  EXPECT_EQ(find_model("GPT2-XL")->name, "gpt2-1.5b");
  EXPECT_EQ(find_model("mistral-7b-v0.3")->name, "mistral-7b");
  EXPECT_FALSE(find_model("llama4-scout").has_value());
  EXPECT_FALSE(find_model("").has_value());
}

// ---------------------------------------------------------------- parameter_count
TEST(ParameterCount, TinyLlamaBreakdown) {
  // V=256 D=64 L=2 H=4 KV=2 (head 16, kv width 32) F=128, untied.
  const int64_t embed = 256 * 64;
  const int64_t attn = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64;  // q k v o
  const int64_t mlp = 3 * 64 * 128;                            // gate up down
  const int64_t norms = 2 * 64;
  const int64_t expected = embed + 2 * (attn + mlp + norms) + 64 + 256 * 64;
  EXPECT_EQ(expected, 106'816);
  EXPECT_EQ(parameter_count(zoo_model("tiny-llama")), expected);
}

TEST(ParameterCount, TinyGpt2Breakdown) {
  // V=256 P=128 D=64 L=2 F=256, tied head, biases everywhere.
  const int64_t wte = 256 * 64, wpe = 128 * 64;
  const int64_t layer = 2 * 64            // ln_1
                        + 64 * 192 + 192  // c_attn
                        + 64 * 64 + 64    // attn.c_proj
                        + 2 * 64          // ln_2
                        + 64 * 256 + 256  // c_fc
                        + 256 * 64 + 64;  // mlp.c_proj
  const int64_t expected = wte + wpe + 2 * layer + 2 * 64;
  EXPECT_EQ(expected, 124'672);
  EXPECT_EQ(parameter_count(zoo_model("tiny-gpt2")), expected);
}

TEST(ParameterCount, UntyingAddsTheOutputProjection) {
  for (const char* name : {"tiny-llama", "tiny-gpt2", "llama3.1-8b", "gpt2-124m"}) {
    auto tied = zoo_model(name);
    tied.tie_embeddings = true;
    auto untied = tied;
    untied.tie_embeddings = false;
    EXPECT_EQ(parameter_count(untied) - parameter_count(tied), tied.vocab_size * tied.dim) << name;
  }
}

TEST(ParameterCount, QkvBiasAddsQKVWidthPerLayer) {
  auto q = zoo_model("qwen2.5-7b");
  auto no_bias = q;
  no_bias.qkv_bias = false;
  const int64_t kv = q.n_kv_heads * q.head_dim();
  EXPECT_EQ(parameter_count(q) - parameter_count(no_bias), q.n_layers * (q.dim + 2 * kv));
}

TEST(ParameterCount, UnvalidatedConfigIsAnInternalError) {
  ModelConfig c = zoo_model("tiny-llama");
  c.n_heads = 0;
  EXPECT_THROW(parameter_count(c), InternalError);
}

// Random valid configs of either architecture, small enough to never overflow.
rc::Gen<ModelConfig> gen_model() {
  return rc::gen::exec([] {
    ModelConfig c;
    c.arch = *rc::gen::element(ModelArch::kLlama, ModelArch::kGpt2);
    c.n_kv_heads = *rc::gen::inRange<int64_t>(1, 9);
    c.n_heads = c.n_kv_heads * *rc::gen::inRange<int64_t>(1, 9);
    if (c.arch == ModelArch::kGpt2) c.n_kv_heads = c.n_heads;
    c.dim = c.n_heads * *rc::gen::inRange<int64_t>(1, 257);
    c.vocab_size = *rc::gen::inRange<int64_t>(1, 300'000);
    c.n_layers = *rc::gen::inRange<int64_t>(1, 200);
    c.ffn_dim = *rc::gen::inRange<int64_t>(1, 100'000);
    c.max_seq_len = *rc::gen::inRange<int64_t>(1, 200'000);
    c.tie_embeddings = *rc::gen::arbitrary<bool>();
    c.qkv_bias = *rc::gen::arbitrary<bool>();
    c.linear_bias = c.arch == ModelArch::kGpt2;
    return c;
  });
}

RC_GTEST_PROP(ParameterCountProperty, IsAffineAndIncreasingInLayers, ()) {
  ModelConfig c = *gen_model();
  validate_model(c, "model");  // throws (and fails the property) if the generator is wrong
  const int64_t p1 = parameter_count(c);
  c.n_layers += 1;
  const int64_t p2 = parameter_count(c);
  c.n_layers += 1;
  const int64_t p3 = parameter_count(c);
  RC_ASSERT(p1 > 0);
  RC_ASSERT(p2 > p1);
  RC_ASSERT(p3 - p2 == p2 - p1);  // every layer has the same size
}

RC_GTEST_PROP(ParameterCountProperty, IsIncreasingInEverySize, ()) {
  const ModelConfig c = *gen_model();
  const int64_t base = parameter_count(c);
  ModelConfig bigger = c;
  bigger.vocab_size += 1;
  RC_ASSERT(parameter_count(bigger) > base);
  bigger = c;
  bigger.ffn_dim += 1;
  RC_ASSERT(parameter_count(bigger) > base);
  bigger = c;
  bigger.dim += bigger.n_heads;  // keep dim divisible by n_heads
  RC_ASSERT(parameter_count(bigger) > base);
}

// ---------------------------------------------------------------- HF import
struct HfSample {
  const char* file;
  const char* zoo_name;
  const char* model_type;
};

class HfSampleImport : public testing::TestWithParam<HfSample> {};

TEST_P(HfSampleImport, MatchesTheZoo) {
  const auto& s = GetParam();
  const ModelConfig got = model_from_hf_config_file(hf_data(s.file));
  const ModelConfig want = zoo_model(s.zoo_name);
  EXPECT_EQ(got.name, s.model_type);
  EXPECT_EQ(parameter_count(got), parameter_count(want));
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_EQ(got.vocab_size, want.vocab_size);
  EXPECT_EQ(got.dim, want.dim);
  EXPECT_EQ(got.n_layers, want.n_layers);
  EXPECT_EQ(got.n_heads, want.n_heads);
  EXPECT_EQ(got.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(got.ffn_dim, want.ffn_dim);
  EXPECT_EQ(got.max_seq_len, want.max_seq_len);
  EXPECT_EQ(got.norm_eps, want.norm_eps);
  EXPECT_EQ(got.tie_embeddings, want.tie_embeddings);
  EXPECT_EQ(got.qkv_bias, want.qkv_bias);
  EXPECT_EQ(got.linear_bias, want.linear_bias);
  if (got.arch == ModelArch::kLlama) {
    EXPECT_EQ(got.rope_theta, want.rope_theta);
  }
}

INSTANTIATE_TEST_SUITE_P(Samples, HfSampleImport,
                         testing::Values(HfSample{"llama3.1-8b.json", "llama3.1-8b", "llama"},
                                         HfSample{"mistral-7b-v0.3.json", "mistral-7b", "mistral"},
                                         HfSample{"qwen2.5-7b.json", "qwen2.5-7b", "qwen2"},
                                         HfSample{"gpt2.json", "gpt2-124m", "gpt2"}),
                         [](const testing::TestParamInfo<HfSample>& info) {
                           return std::string(info.param.model_type);
                         });

TEST(HfImport, AcceptsAModelDirectory) {
  const auto dir = std::filesystem::path(testing::TempDir()) / "fullshard_hf_dir_test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(hf_data("qwen2.5-7b.json"), dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(parameter_count(model_from_hf_config_file(dir.string())), 7'615'616'512);
}

json minimal_llama() {
  return {{"model_type", "llama"},  {"hidden_size", 64},        {"intermediate_size", 128},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 256}};
}

TEST(HfImport, LlamaFamilyDefaultsFollowTransformers) {
  ModelConfig c = model_from_hf_config(minimal_llama(), "config.json");
  EXPECT_EQ(c.n_kv_heads, 4);  // absent num_key_value_heads => MHA
  EXPECT_EQ(c.max_seq_len, 2048);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias);

  json j = minimal_llama();
  j["num_key_value_heads"] = nullptr;  // null behaves like absent
  EXPECT_EQ(model_from_hf_config(j, "config.json").n_kv_heads, 4);
  j["model_type"] = "mistral";
  EXPECT_EQ(model_from_hf_config(j, "config.json").max_seq_len, 131072);
  j["model_type"] = "qwen2";
  c = model_from_hf_config(j, "config.json");
  EXPECT_EQ(c.max_seq_len, 32768);
  EXPECT_TRUE(c.qkv_bias);
  j["tie_word_embeddings"] = true;  // Qwen2.5-0.5B..3B
  EXPECT_EQ(parameter_count(c) - parameter_count(model_from_hf_config(j, "config.json")), 256 * 64);
}

TEST(HfImport, RopeThetaInsideRopeParameters) {
  json j = minimal_llama();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  EXPECT_EQ(model_from_hf_config(j, "config.json").rope_theta, 500000.0);
}

// NOTE [Llama 3 RoPE scaling] (core/runtime/rope_args.h): Llama 3.1's config.json carries
// rope_scaling (transformers 4.x); transformers 5.x writes the same object as rope_parameters, with
// rope_theta inside.
TEST(HfImport, Llama31RopeScaling) {
  const ModelConfig c = model_from_hf_config_file(hf_data("llama3.1-8b.json"));
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192.0);
  // The inverse frequencies transformers' _compute_llama3_parameters gives for this config
  // (torch 2.15.0, transformers 5.23.0, fp32): kept (i < 28), interpolated (28..31) and
  // divided by 8 (i >= 32).
  const auto inv = rope_inv_freq(c.rope(), c.head_dim());
  ASSERT_EQ(inv.size(), 64u);
  const std::pair<int, double> torch[] = {{0, 1.0},
                                          {20, 0.016560440883040428},
                                          {28, 0.0032114461064338684},
                                          {30, 0.0013718936825171113},
                                          {32, 0.0005248460220173001},
                                          {40, 3.428102354519069e-05},
                                          {63, 3.068925877869333e-07}};
  for (const auto& [i, want] : torch)
    EXPECT_NEAR(inv[static_cast<size_t>(i)], want, 2e-7 * want) << "pair " << i;

  json j = read_json(hf_data("llama3.1-8b.json"));
  json params = j["rope_scaling"];
  params["rope_theta"] = 500000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = params;
  const ModelConfig v5 = model_from_hf_config(j, "config.json");
  EXPECT_EQ(v5.rope_theta, 500000.0);
  EXPECT_EQ(v5.rope_scaling.factor, 8.0);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  EXPECT_FALSE(model_from_hf_config(j, "config.json").rope_scaling.enabled());
}

TEST(HfImport, RopeScalingErrorsNameTheField) {
  json j = read_json(hf_data("llama3.1-8b.json"));
  j["rope_scaling"]["rope_type"] = "yarn";
  expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                     "config.json: rope_scaling.rope_type", {"yarn", "llama3"});
  j = read_json(hf_data("llama3.1-8b.json"));
  j["rope_scaling"].erase("factor");
  expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                     "config.json: rope_scaling.factor", {"missing"});
  j = read_json(hf_data("llama3.1-8b.json"));
  j["rope_scaling"]["high_freq_factor"] = 1.0;
  expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                     "config.json: rope_scaling.high_freq_factor", {"low_freq_factor"});
  j["rope_scaling"] = "llama3";
  expect_input_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: rope_scaling");
}

TEST(HfImport, ArchitecturesAloneIdentifyTheModel) {
  json j = minimal_llama();
  j.erase("model_type");
  j["architectures"] = {"Qwen2ForCausalLM"};
  const ModelConfig c = model_from_hf_config(j, "config.json");
  EXPECT_EQ(c.name, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
}

TEST(HfImport, HeadDimEqualToHiddenOverHeadsIsAccepted) {
  json j = read_json(hf_data("llama3.1-8b.json"));
  j["head_dim"] = 128;  // as in the Llama 3.1 405B config
  EXPECT_EQ(parameter_count(model_from_hf_config(j, "config.json")), 8'030'261'248);
}

TEST(HfImport, DecoupledHeadDimIsUnsupported) {
  json j = read_json(hf_data("llama3.1-8b.json"));
  j["head_dim"] = 256;
  expect_input_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: head_dim",
                     {"256", "128", "not supported"});
}

TEST(HfImport, Gpt2InnerSizeAndTying) {
  json j = read_json(hf_data("gpt2.json"));
  EXPECT_EQ(model_from_hf_config(j, "config.json").ffn_dim, 3072);  // n_inner absent
  j["n_inner"] = nullptr;
  EXPECT_EQ(model_from_hf_config(j, "config.json").ffn_dim, 3072);
  j["n_inner"] = 1000;
  EXPECT_EQ(model_from_hf_config(j, "config.json").ffn_dim, 1000);
  j.erase("n_inner");
  j["tie_word_embeddings"] = false;
  EXPECT_EQ(parameter_count(model_from_hf_config(j, "config.json")), 124'439'808 + 50257 * 768);
}

TEST(HfImport, UnknownArchitectureListsSupportedOnes) {
  json j = minimal_llama();
  j["model_type"] = "qwen3";
  expect_input_error(
      [&] { model_from_hf_config(j, "config.json"); }, "config.json: model_type",
      {"qwen3", "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel"});
  j["model_type"] = "llama";
  j["architectures"] = {"LlamaForSequenceClassification"};
  expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                     "config.json: architectures[0]", {"LlamaForSequenceClassification"});
  j["architectures"] = {"MistralForCausalLM"};
  expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                     "config.json: architectures[0]", {"does not match"});
  j.erase("architectures");
  j.erase("model_type");
  expect_input_error([&] { model_from_hf_config(j, "config.json"); }, "config.json: model_type",
                     {"missing"});
}

TEST(HfImport, MissingRequiredFieldIsNamed) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "vocab_size"}) {
    json j = read_json(hf_data("mistral-7b-v0.3.json"));
    j.erase(key);
    expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                       std::string("config.json: ") + key, {"missing"});
  }
  for (const char* key : {"n_embd", "n_layer", "n_head", "n_positions", "vocab_size"}) {
    json j = read_json(hf_data("gpt2.json"));
    j.erase(key);
    expect_input_error([&] { model_from_hf_config(j, "gpt2/config.json"); },
                       std::string("gpt2/config.json: ") + key, {"missing"});
  }
}

TEST(HfImport, BadValuesNameTheFieldAndValue) {
  auto bad = [](const char* key, json value, const std::string& needle) {
    json j = minimal_llama();
    j[key] = std::move(value);
    expect_input_error([&] { model_from_hf_config(j, "config.json"); },
                       std::string("config.json: ") + key, {needle});
  };
  bad("hidden_size", "4096", "\"4096\"");
  bad("hidden_size", 64.5, "64.5");
  bad("hidden_size", -64, "-64");
  bad("num_attention_heads", 0, ">= 1");
  bad("num_attention_heads", 3, "does not divide hidden_size 64");
  bad("num_key_value_heads", 3, "does not divide num_attention_heads 4");
  bad("tie_word_embeddings", "no", "true or false");
  bad("rms_norm_eps", -1e-5, "positive");
  bad("attention_bias", true, "not supported");
  bad("vocab_size", json(uint64_t{1} << 63), "too large");
  expect_input_error([] { model_from_hf_config(json::array(), "config.json"); }, "config.json",
                     {"not a JSON object"});
}

TEST(HfImport, JsonPathWhereUsesDots) {
  json j = minimal_llama();
  j.erase("vocab_size");
  expect_input_error([&] { model_from_hf_config(j, "model.hf_config"); },
                     "model.hf_config.vocab_size");
}

TEST(HfImport, HugeSizesAreAnInputErrorNotAnOverflow) {
  json j = minimal_llama();
  j["hidden_size"] = int64_t{1} << 40;
  j["num_attention_heads"] = 1;
  j["vocab_size"] = int64_t{1} << 40;
  expect_input_error([&] { model_from_hf_config(j, "config.json"); }, "config.json", {"2^63"});
}

TEST(HfFile, MissingFileNamesThePath) {
  const std::string path = hf_data("does-not-exist.json");
  expect_input_error([&] { model_from_hf_config_file(path); }, path, {"file not found"});
}

TEST(HfFile, MalformedJsonNamesThePath) {
  const auto path = (std::filesystem::path(testing::TempDir()) / "fullshard_bad.json").string();
  std::ofstream(path) << "{\"model_type\": \"llama\",";
  expect_input_error([&] { model_from_hf_config_file(path); }, path + ":1:23", {"malformed JSON"});
}

// ---------------------------------------------------------------- validate_model
TEST(ValidateModel, NonPositiveSizesNameTheField) {
  const std::pair<const char*, int64_t ModelConfig::*> fields[] = {
      {"vocab_size", &ModelConfig::vocab_size},   {"dim", &ModelConfig::dim},
      {"n_layers", &ModelConfig::n_layers},       {"n_heads", &ModelConfig::n_heads},
      {"n_kv_heads", &ModelConfig::n_kv_heads},   {"ffn_dim", &ModelConfig::ffn_dim},
      {"max_seq_len", &ModelConfig::max_seq_len},
  };
  for (const auto& [name, member] : fields) {
    ModelConfig c = zoo_model("tiny-llama");
    c.*member = 0;
    expect_input_error([&] { validate_model(c, "model"); }, std::string("model.") + name,
                       {"is 0", ">= 1"});
  }
}

TEST(ValidateModel, HeadDivisibility) {
  ModelConfig c = zoo_model("tiny-llama");
  c.n_heads = 3;
  c.n_kv_heads = 3;
  expect_input_error([&] { validate_model(c, "model"); }, "model.n_heads",
                     {"3", "does not divide dim 64"});
  c = zoo_model("tiny-llama");
  c.n_kv_heads = 3;
  expect_input_error([&] { validate_model(c, "model"); }, "model.n_kv_heads",
                     {"does not divide n_heads 4"});
  c.n_kv_heads = 8;  // more kv heads than heads
  expect_input_error([&] { validate_model(c, "model"); }, "model.n_kv_heads");
  c = zoo_model("tiny-gpt2");
  c.n_kv_heads = 2;
  expect_input_error([&] { validate_model(c, "model"); }, "model.n_kv_heads", {"MHA"});
}

TEST(ValidateModel, NormEpsAndRopeTheta) {
  ModelConfig c = zoo_model("tiny-llama");
  c.norm_eps = 0;
  expect_input_error([&] { validate_model(c, "model"); }, "model.norm_eps");
  c = zoo_model("tiny-llama");
  c.rope_theta = -1;
  expect_input_error([&] { validate_model(c, "model"); }, "model.rope_theta");
}

}  // namespace
}  // namespace fullshard
