#include "core/model/model_config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/json_file.h"

namespace fullshard {
namespace {

// ---------------------------------------------------------------- zoo
// NOTE [Zoo sources]: every entry is the published Hugging Face config.json of the *base*
// checkpoint (meta-llama/Llama-2-7b-hf, meta-llama/Llama-3.1-8B, mistralai/Mistral-7B-v0.3,
// Qwen/Qwen2.5-7B, openai-community/gpt2, ...). "mistral-7b" is v0.3 (vocab 32768, rope
// theta 1e6, no sliding window); v0.1 is kept as "mistral-7b-v0.1". Qwen2.5 ties embeddings
// only at 0.5B/1.5B/3B, so the 7B and 14B here are untied. tests/unit/model_config_test.cc
// checks every parameter count against the published number.
std::vector<ModelConfig> build_zoo() {
  using A = ModelArch;
  std::vector<ModelConfig> z;
  auto llama = [&](ModelConfig c) {
    c.arch = A::kLlama;
    z.push_back(std::move(c));
  };
  auto gpt2 = [&](ModelConfig c) {
    c.arch = A::kGpt2;
    c.n_kv_heads = c.n_heads;
    c.ffn_dim = 4 * c.dim;
    c.max_seq_len = c.max_seq_len ? c.max_seq_len : 1024;
    c.vocab_size = c.vocab_size ? c.vocab_size : 50257;
    c.tie_embeddings = true;
    c.linear_bias = true;
    z.push_back(std::move(c));
  };
  // The zoo leaves ModelConfig::implementation at its default (the "fullshard" preset).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  // clang-format off
  llama({.name = "llama2-7b", .vocab_size = 32000, .dim = 4096, .n_layers = 32, .n_heads = 32,
         .n_kv_heads = 32, .ffn_dim = 11008, .max_seq_len = 4096, .norm_eps = 1e-5,
         .rope_theta = 1e4});
  llama({.name = "llama2-13b", .vocab_size = 32000, .dim = 5120, .n_layers = 40, .n_heads = 40,
         .n_kv_heads = 40, .ffn_dim = 13824, .max_seq_len = 4096, .norm_eps = 1e-5,
         .rope_theta = 1e4});
  llama({.name = "llama2-70b", .vocab_size = 32000, .dim = 8192, .n_layers = 80, .n_heads = 64,
         .n_kv_heads = 8, .ffn_dim = 28672, .max_seq_len = 4096, .norm_eps = 1e-5,
         .rope_theta = 1e4});
  llama({.name = "llama3.1-8b", .vocab_size = 128256, .dim = 4096, .n_layers = 32, .n_heads = 32,
         .n_kv_heads = 8, .ffn_dim = 14336, .max_seq_len = 131072, .norm_eps = 1e-5,
         .rope_theta = 5e5});
  llama({.name = "llama3.1-70b", .vocab_size = 128256, .dim = 8192, .n_layers = 80, .n_heads = 64,
         .n_kv_heads = 8, .ffn_dim = 28672, .max_seq_len = 131072, .norm_eps = 1e-5,
         .rope_theta = 5e5});
  llama({.name = "llama3.1-405b", .vocab_size = 128256, .dim = 16384, .n_layers = 126,
         .n_heads = 128, .n_kv_heads = 8, .ffn_dim = 53248, .max_seq_len = 131072,
         .norm_eps = 1e-5, .rope_theta = 5e5});
  llama({.name = "mistral-7b", .vocab_size = 32768, .dim = 4096, .n_layers = 32, .n_heads = 32,
         .n_kv_heads = 8, .ffn_dim = 14336, .max_seq_len = 32768, .norm_eps = 1e-5,
         .rope_theta = 1e6});
  llama({.name = "mistral-7b-v0.1", .vocab_size = 32000, .dim = 4096, .n_layers = 32,
         .n_heads = 32, .n_kv_heads = 8, .ffn_dim = 14336, .max_seq_len = 32768, .norm_eps = 1e-5,
         .rope_theta = 1e4});
  llama({.name = "qwen2.5-7b", .vocab_size = 152064, .dim = 3584, .n_layers = 28, .n_heads = 28,
         .n_kv_heads = 4, .ffn_dim = 18944, .max_seq_len = 131072, .norm_eps = 1e-6,
         .rope_theta = 1e6, .qkv_bias = true});
  llama({.name = "qwen2.5-14b", .vocab_size = 152064, .dim = 5120, .n_layers = 48, .n_heads = 40,
         .n_kv_heads = 8, .ffn_dim = 13824, .max_seq_len = 131072, .norm_eps = 1e-5,
         .rope_theta = 1e6, .qkv_bias = true});
  gpt2({.name = "gpt2-124m", .dim = 768, .n_layers = 12, .n_heads = 12});
  gpt2({.name = "gpt2-355m", .dim = 1024, .n_layers = 24, .n_heads = 16});
  gpt2({.name = "gpt2-774m", .dim = 1280, .n_layers = 36, .n_heads = 20});
  gpt2({.name = "gpt2-1.5b", .dim = 1600, .n_layers = 48, .n_heads = 25});
  // Tiny configs for tests and examples: every dimension small enough to run for real.
  llama({.name = "tiny-llama", .vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
         .n_kv_heads = 2, .ffn_dim = 128, .max_seq_len = 128, .norm_eps = 1e-5, .rope_theta = 1e4});
  gpt2({.name = "tiny-gpt2", .vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
        .max_seq_len = 128});
  // clang-format on
#pragma GCC diagnostic pop
  return z;
}

// Other spellings people use for the same checkpoints (the Hugging Face repo names).
struct Alias {
  const char* alias;
  const char* name;
};
constexpr Alias kAliases[] = {
    {"gpt2", "gpt2-124m"},       {"gpt2-small", "gpt2-124m"}, {"gpt2-medium", "gpt2-355m"},
    {"gpt2-large", "gpt2-774m"}, {"gpt2-xl", "gpt2-1.5b"},    {"mistral-7b-v0.3", "mistral-7b"},
};

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// ---------------------------------------------------------------- counting
// Sums products of int64 sizes, remembering whether anything overflowed.
class CheckedSum {
 public:
  void add(int64_t a, int64_t b = 1) {
    int64_t p = 0;
    if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(total_, p, &total_))
      overflow_ = true;
  }
  std::optional<int64_t> value() const {
    return overflow_ ? std::nullopt : std::optional<int64_t>(total_);
  }

 private:
  int64_t total_ = 0;
  bool overflow_ = false;
};

// nullopt when the count does not fit in int64. Requires n_heads >= 1. Every term goes
// through CheckedSum so that unvalidated, absurd sizes cannot overflow silently.
std::optional<int64_t> checked_parameter_count(const ModelConfig& c) {
  const int64_t d = c.dim, f = c.ffn_dim, v = c.vocab_size;
  CheckedSum kv_width;  // width of the k and v projections
  kv_width.add(c.n_kv_heads, c.head_dim());
  if (!kv_width.value()) return std::nullopt;
  const int64_t kv = *kv_width.value();
  const bool lb = c.linear_bias;
  CheckedSum layer;
  CheckedSum total;
  // Attention: q and o are D x D, k and v are D x kv (GPT-2 fuses q/k/v into c_attn, whose
  // Conv1D weight is [D, D + 2 kv]; the count is the same).
  layer.add(d, d);
  layer.add(d, kv);
  layer.add(d, kv);
  layer.add(d, d);
  if (c.qkv_bias || lb) {  // Qwen2: bias on q/k/v only; GPT-2: on every linear
    layer.add(d);
    layer.add(kv);
    layer.add(kv);
  }
  if (lb) layer.add(d);  // o / attn.c_proj bias
  if (c.arch == ModelArch::kLlama) {
    // SwiGLU: gate (w1) and up (w3) are D x F, down (w2) is F x D.
    layer.add(d, f);
    layer.add(d, f);
    layer.add(f, d);
    if (lb) {
      layer.add(f, 2);
      layer.add(d);
    }
    layer.add(d, 2);  // input_layernorm, post_attention_layernorm (RMSNorm: weight only)
    total.add(v, d);  // embed_tokens
    total.add(d);     // final norm
  } else {
    // GELU MLP: c_fc D x F, c_proj F x D; LayerNorms carry weight and bias.
    layer.add(d, f);
    layer.add(f, d);
    if (lb) {
      layer.add(f);
      layer.add(d);
    }
    layer.add(d, 4);              // ln_1, ln_2
    total.add(v, d);              // wte
    total.add(c.max_seq_len, d);  // wpe
    total.add(d, 2);              // ln_f
  }
  const auto per_layer = layer.value();
  if (!per_layer) return std::nullopt;
  total.add(*per_layer, c.n_layers);
  if (!c.tie_embeddings) total.add(v, d);  // lm_head (no bias)
  return total.value();
}

// ---------------------------------------------------------------- error paths
// A file name gets "file: field" ("config.json: hidden_size"), a JSON path gets "path.field"
// ("model.dim"), so that messages read naturally for both.
std::string field_path(const std::string& where, const std::string& field) {
  if (where.empty()) return field;
  const bool is_file = where.find('/') != std::string::npos ||
                       (where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0);
  return where + (is_file ? ": " : ".") + field;
}

// ---------------------------------------------------------------- HF import
enum class HfFamily { kLlama, kMistral, kQwen2, kGpt2 };

struct HfArch {
  const char* model_type;
  const char* architecture;  // the causal-LM class in "architectures"
  HfFamily family;
};
constexpr HfArch kHfArchs[] = {
    {"llama", "LlamaForCausalLM", HfFamily::kLlama},
    {"mistral", "MistralForCausalLM", HfFamily::kMistral},
    {"qwen2", "Qwen2ForCausalLM", HfFamily::kQwen2},
    {"gpt2", "GPT2LMHeadModel", HfFamily::kGpt2},
};
constexpr const char* kSupportedHf =
    "supported: llama (LlamaForCausalLM), mistral (MistralForCausalLM), qwen2 "
    "(Qwen2ForCausalLM), gpt2 (GPT2LMHeadModel)";

// Reads one config.json object; every accessor names the field in its errors.
class HfReader {
 public:
  HfReader(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}

  std::string path(const std::string& key) const { return field_path(where_, key); }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  // A positive integer; `fallback` (if given) is used when the key is missing or null.
  int64_t positive_int(const std::string& key, std::optional<int64_t> fallback = {}) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw InputError(path(key), "is missing",
                       "add it from the model's published config.json (it is required)");
    }
    const auto& x = j_.at(key);
    if (!x.is_number_integer())
      throw InputError(path(key), "is " + x.dump() + ", not an integer", "give a positive integer");
    if (x.is_number_unsigned() &&
        x.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw InputError(path(key), "is " + x.dump() + ", too large", "give a realistic size");
    const auto value = x.get<int64_t>();
    if (value < 1) throw InputError(path(key), "is " + x.dump(), "it must be >= 1");
    return value;
  }

  double positive_number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& x = j_.at(key);
    if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
      throw InputError(path(key), "is " + x.dump(), "give a positive number");
    return x.get<double>();
  }

  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& x = j_.at(key);
    if (!x.is_boolean()) throw InputError(path(key), "is " + x.dump(), "give true or false");
    return x.get<bool>();
  }

  // Llama 3.1's rope_scaling (transformers 4.x writes "rope_scaling", 5.x "rope_parameters",
  // which also holds rope_theta); absent, null or rope_type "default": no scaling. NOTE
  // [Llama 3 RoPE scaling] (core/runtime/rope_args.h).
  RopeScaling rope_scaling() const {
    const char* key = has("rope_scaling")      ? "rope_scaling"
                      : has("rope_parameters") ? "rope_parameters"
                                               : nullptr;
    if (!key) return {};
    const auto& j = j_.at(key);
    if (!j.is_object())
      throw InputError(path(key), "is " + j.dump(),
                       "give an object such as {\"rope_type\": \"llama3\", ...}");
    const HfReader r(j, path(key));
    const char* type_key = r.has("rope_type") ? "rope_type" : "type";  // "type": older configs
    if (!r.has(type_key)) {
      if (std::string(key) == "rope_parameters") return {};  // only rope_theta
      throw InputError(r.path("rope_type"), "is missing",
                       "give \"llama3\" (Llama 3.1) or remove rope_scaling");
    }
    const auto& t = j.at(type_key);
    if (!t.is_string())
      throw InputError(r.path(type_key), "is " + t.dump(), "give \"llama3\" or \"default\"");
    if (t.get<std::string>() == "default") return {};
    if (t.get<std::string>() != "llama3")
      throw InputError(r.path(type_key),
                       "is \"" + t.get<std::string>() + "\", which fullshard does not implement",
                       "only \"llama3\" (Llama 3.1 / 3.2) RoPE scaling is supported");
    auto required = [&](const char* k) {
      if (!r.has(k))
        throw InputError(r.path(k), "is missing", "give it from the model's published config.json");
      return r.positive_number(k, 0);
    };
    RopeScaling sc;
    sc.factor = required("factor");
    sc.low_freq_factor = required("low_freq_factor");
    sc.high_freq_factor = required("high_freq_factor");
    sc.original_max_position_embeddings =
        static_cast<double>(r.positive_int("original_max_position_embeddings"));
    if (!(sc.high_freq_factor > sc.low_freq_factor))
      throw InputError(r.path("high_freq_factor"),
                       "is " + j.at("high_freq_factor").dump() + ", not above low_freq_factor " +
                           j.at("low_freq_factor").dump(),
                       "use the published values (Llama 3.1: low 1, high 4)");
    return sc;
  }

  // rope_theta sits at the top level in most configs; newer transformers write it inside
  // "rope_parameters".
  double rope_theta(double fallback) const {
    if (has("rope_theta")) return positive_number("rope_theta", fallback);
    if (has("rope_parameters") && j_.at("rope_parameters").is_object())
      return HfReader(j_.at("rope_parameters"), path("rope_parameters"))
          .positive_number("rope_theta", fallback);
    return fallback;
  }

  const HfArch& arch() const {
    const HfArch* by_type = nullptr;
    if (has("model_type")) {
      const auto& t = j_.at("model_type");
      if (!t.is_string()) throw InputError(path("model_type"), "is " + t.dump(), kSupportedHf);
      for (const auto& a : kHfArchs)
        if (t.get<std::string>() == a.model_type) by_type = &a;
      if (!by_type)
        throw InputError(path("model_type"), "\"" + t.get<std::string>() + "\" is not supported",
                         kSupportedHf);
    }
    const HfArch* by_class = nullptr;
    if (has("architectures")) {
      const auto& list = j_.at("architectures");
      const std::string p = path("architectures") + "[0]";
      if (!list.is_array() || list.empty() || !list[0].is_string())
        throw InputError(path("architectures"), "is " + list.dump(),
                         "give a list such as [\"LlamaForCausalLM\"]");
      for (const auto& a : kHfArchs)
        if (list[0].get<std::string>() == a.architecture) by_class = &a;
      if (!by_class)
        throw InputError(p, "\"" + list[0].get<std::string>() + "\" is not supported",
                         std::string(kSupportedHf) + " (causal-LM heads only)");
      if (by_type && by_type != by_class)
        throw InputError(p,
                         "\"" + list[0].get<std::string>() + "\" does not match model_type \"" +
                             by_type->model_type + "\"",
                         std::string("use ") + by_type->architecture + " or fix model_type");
    }
    if (by_type) return *by_type;
    if (by_class) return *by_class;
    throw InputError(path("model_type"), "is missing (and so is \"architectures\")",
                     std::string("add \"model_type\"; ") + kSupportedHf);
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

ModelConfig llama_from_hf(const HfReader& r, HfFamily family) {
  ModelConfig c;
  c.arch = ModelArch::kLlama;
  c.dim = r.positive_int("hidden_size");
  c.ffn_dim = r.positive_int("intermediate_size");
  c.n_layers = r.positive_int("num_hidden_layers");
  c.n_heads = r.positive_int("num_attention_heads");
  c.vocab_size = r.positive_int("vocab_size");
  // Absent/null num_key_value_heads means MHA in all three HF classes.
  c.n_kv_heads = r.positive_int("num_key_value_heads", c.n_heads);
  // Defaults are those of LlamaConfig / MistralConfig / Qwen2Config.
  const int64_t default_positions = family == HfFamily::kLlama     ? 2048
                                    : family == HfFamily::kMistral ? 4096 * 32
                                                                   : 32768;
  c.max_seq_len = r.positive_int("max_position_embeddings", default_positions);
  c.norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = r.rope_theta(10000.0);
  c.rope_scaling = r.rope_scaling();
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  c.qkv_bias = family == HfFamily::kQwen2;  // Qwen2Attention hard-codes bias on q/k/v

  if (c.dim % c.n_heads != 0)
    throw InputError(r.path("num_attention_heads"),
                     "is " + std::to_string(c.n_heads) + ", which does not divide hidden_size " +
                         std::to_string(c.dim),
                     "use the published value; head size must be hidden_size / heads");
  if (c.n_heads % c.n_kv_heads != 0)
    throw InputError(r.path("num_key_value_heads"),
                     "is " + std::to_string(c.n_kv_heads) +
                         ", which does not divide num_attention_heads " + std::to_string(c.n_heads),
                     "use the published value (grouped-query attention needs a divisor)");
  if (r.has("head_dim")) {
    const int64_t head_dim = r.positive_int("head_dim");
    if (head_dim != c.head_dim())
      throw InputError(r.path("head_dim"),
                       "is " + std::to_string(head_dim) +
                           " but hidden_size / num_attention_heads is " +
                           std::to_string(c.head_dim()),
                       "decoupled head_dim is not supported; only head_dim == hidden_size / heads");
  }
  // LlamaConfig's optional biases (o_proj / MLP) have no slot in ModelConfig.
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (family == HfFamily::kLlama && r.boolean(key, false))
      throw InputError(r.path(key), "is true", "Llama-style models with biases are not supported");
  return c;
}

ModelConfig gpt2_from_hf(const HfReader& r) {
  ModelConfig c;
  c.arch = ModelArch::kGpt2;
  c.dim = r.positive_int("n_embd");
  c.n_layers = r.positive_int("n_layer");
  c.n_heads = r.positive_int("n_head");
  c.n_kv_heads = c.n_heads;
  c.max_seq_len = r.positive_int("n_positions");  // sizes the learned position table
  c.vocab_size = r.positive_int("vocab_size");
  c.ffn_dim = r.positive_int("n_inner", 4 * c.dim);  // null or absent: 4 * n_embd
  c.norm_eps = r.positive_number("layer_norm_epsilon", 1e-5);
  c.tie_embeddings = r.boolean("tie_word_embeddings", true);  // PretrainedConfig default
  c.linear_bias = true;
  if (c.dim % c.n_heads != 0)
    throw InputError(r.path("n_head"),
                     "is " + std::to_string(c.n_heads) + ", which does not divide n_embd " +
                         std::to_string(c.dim),
                     "use the published value; head size must be n_embd / n_head");
  return c;
}

}  // namespace

// ---------------------------------------------------------------- public API

int64_t parameter_count(const ModelConfig& c) {
  FULLSHARD_CHECK(c.n_heads >= 1, "parameter_count needs a validated config (n_heads >= 1)");
  const auto count = checked_parameter_count(c);
  FULLSHARD_CHECK(count.has_value(), "parameter count of '" + c.name + "' overflows int64");
  return *count;
}

const std::vector<ModelConfig>& model_zoo() {
  static const std::vector<ModelConfig> zoo = build_zoo();  // immutable after first use
  return zoo;
}

std::optional<ModelConfig> find_model(const std::string& name) {
  std::string key = lower(name);
  for (const auto& a : kAliases)
    if (key == a.alias) key = a.name;
  for (const auto& m : model_zoo())
    if (m.name == key) return m;
  return std::nullopt;
}

ModelConfig model_from_hf_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    throw InputError(where, "is " + std::string(j.type_name()) + ", not a JSON object",
                     "pass a Hugging Face config.json");
  const HfReader r(j, where);
  const HfArch& arch = r.arch();
  ModelConfig c = arch.family == HfFamily::kGpt2 ? gpt2_from_hf(r) : llama_from_hf(r, arch.family);
  c.name = arch.model_type;
  validate_model(c, where);  // backstop: size overflow and anything not caught above
  return c;
}

ModelConfig model_from_hf_config_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A model directory (what from_pretrained takes) is accepted: read its config.json.
  const std::string file =
      fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  return model_from_hf_config(read_json_input(file, "a Hugging Face config.json"), file);
}

void validate_model(const ModelConfig& c, const std::string& where) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", c.vocab_size},   {"dim", c.dim},
      {"n_layers", c.n_layers},       {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},   {"ffn_dim", c.ffn_dim},
      {"max_seq_len", c.max_seq_len},
  };
  for (const auto& [field, value] : sizes)
    if (value < 1)
      throw InputError(field_path(where, field), "is " + std::to_string(value), "it must be >= 1");
  if (c.dim % c.n_heads != 0)
    throw InputError(
        field_path(where, "n_heads"),
        "is " + std::to_string(c.n_heads) + ", which does not divide dim " + std::to_string(c.dim),
        "choose n_heads so that dim / n_heads is a whole head size");
  if (c.n_heads % c.n_kv_heads != 0)
    throw InputError(field_path(where, "n_kv_heads"),
                     "is " + std::to_string(c.n_kv_heads) + ", which does not divide n_heads " +
                         std::to_string(c.n_heads),
                     "choose a divisor of n_heads (n_kv_heads == n_heads for plain MHA)");
  if (c.arch == ModelArch::kGpt2 && c.n_kv_heads != c.n_heads)
    throw InputError(field_path(where, "n_kv_heads"),
                     "is " + std::to_string(c.n_kv_heads) + " but GPT-2 attention is MHA",
                     "set n_kv_heads equal to n_heads (" + std::to_string(c.n_heads) + ")");
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps))
    throw InputError(field_path(where, "norm_eps"), "is " + std::to_string(c.norm_eps),
                     "give a small positive number such as 1e-5");
  if (c.arch == ModelArch::kLlama && (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)))
    throw InputError(field_path(where, "rope_theta"), "is " + std::to_string(c.rope_theta),
                     "give a positive RoPE base such as 10000");
  if (!checked_parameter_count(c))
    throw InputError(where.empty() ? "model" : where, "has more than 2^63 parameters",
                     "check the sizes; they are far beyond any real model");
}

}  // namespace fullshard
