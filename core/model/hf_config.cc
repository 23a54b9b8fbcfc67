// Hugging Face config.json import (docs/models.md, "Hugging Face config.json"): the model types
// fullshard builds, every field mapped or refused by name.
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/common/error.h"
#include "core/common/json_file.h"
#include "core/model/config_path.h"
#include "core/model/model_config.h"

namespace fullshard {
namespace {

// ---------------------------------------------------------------- HF import
enum class HfFamily {
  kLlama,
  kMistral,
  kQwen2,
  kGpt2,
  kMixtral,
  kQwen3Moe,
  kQwen2Moe,
  kDeepseekV3
};

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
    {"mixtral", "MixtralForCausalLM", HfFamily::kMixtral},
    {"qwen3_moe", "Qwen3MoeForCausalLM", HfFamily::kQwen3Moe},
    {"qwen2_moe", "Qwen2MoeForCausalLM", HfFamily::kQwen2Moe},
    {"deepseek_v3", "DeepseekV3ForCausalLM", HfFamily::kDeepseekV3},
};
constexpr const char* kSupportedHf =
    "supported: llama (LlamaForCausalLM), mistral (MistralForCausalLM), qwen2 "
    "(Qwen2ForCausalLM), gpt2 (GPT2LMHeadModel), mixtral (MixtralForCausalLM), qwen3_moe "
    "(Qwen3MoeForCausalLM), qwen2_moe (Qwen2MoeForCausalLM), deepseek_v3 "
    "(DeepseekV3ForCausalLM)";

// Reads one config.json object; every accessor names the field in its errors.
class HfReader {
 public:
  HfReader(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}

  std::string path(const std::string& key) const { return field_path(where_, key); }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool is_null(const std::string& key) const { return j_.contains(key) && j_.at(key).is_null(); }

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

  const nlohmann::json& at(const std::string& key) const { return j_.at(key); }

  // A non-negative number (a coefficient); `fallback` when missing or null.
  double non_negative_number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& x = j_.at(key);
    if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>()))
      throw InputError(path(key), "is " + x.dump(), "give a number >= 0");
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

// NOTE [MoE config.json fields]: every field of MixtralConfig / Qwen3MoeConfig / Qwen2MoeConfig
// that changes the parameters, the routing or the memory is mapped (docs/models.md lists them);
// the router features fullshard does not model (jitter noise, DeepSeek's grouped or
// bias-corrected routing written into these model types) are refused naming the field, so an
// import never silently changes what a checkpoint computes. Defaults are the config classes'.
void moe_from_hf(const HfReader& r, HfFamily family, ModelConfig& c) {
  MoeConfig& m = c.moe;
  m.score_func = MoeScoreFunc::kSoftmax;  // all three: softmax over every expert, then top-k
  if (family == HfFamily::kMixtral) {
    m.num_experts = r.positive_int("num_local_experts");
    m.expert_dim = c.ffn_dim;  // MixtralBlockSparseTop2MLP uses intermediate_size
    m.route_norm = true;       // routing_weights /= routing_weights.sum(-1) (always)
    if (r.has("router_jitter_noise") && r.non_negative_number("router_jitter_noise", 0) != 0)
      throw InputError(
          r.path("router_jitter_noise"),
          "is " + r.at("router_jitter_noise").dump() + ", which fullshard does not model",
          "set it to 0 (the published Mixtral configs do)");
  } else {
    // transformers 5 writes Qwen's num_experts as num_local_experts (Qwen3MoeConfig's
    // attribute_map); the hub's configs say num_experts.
    m.num_experts = r.positive_int(
        !r.has("num_experts") && r.has("num_local_experts") ? "num_local_experts" : "num_experts");
    m.expert_dim = r.positive_int("moe_intermediate_size");
    m.route_norm = r.boolean("norm_topk_prob", false);
    m.interleave_step = r.positive_int("decoder_sparse_step", 1);
    if (r.has("mlp_only_layers")) {
      const auto& list = r.at("mlp_only_layers");
      const std::string p = r.path("mlp_only_layers");
      if (!list.is_array())
        throw InputError(p, "is " + list.dump(), "give a list of layer indices such as [0, 1]");
      for (const auto& x : list) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c.n_layers)
          throw InputError(p, "holds " + x.dump(),
                           "give layer indices from 0 to num_hidden_layers - 1 (" +
                               std::to_string(c.n_layers - 1) + ")");
        m.dense_layers.push_back(x.get<int64_t>());
      }
    }
    if (family == HfFamily::kQwen2Moe) {
      m.shared_expert_dim = r.positive_int("shared_expert_intermediate_size");
      m.shared_expert_gate = true;  // Qwen2MoeSparseMoeBlock.shared_expert_gate, Linear(D, 1)
    } else {
      c.qk_norm = true;  // Qwen3MoeAttention's q_norm / k_norm over head_dim
    }
  }
  m.top_k = r.positive_int("num_experts_per_tok");
  if (m.top_k > m.num_experts)
    throw InputError(r.path("num_experts_per_tok"),
                     "is " + std::to_string(m.top_k) + ", above the " +
                         std::to_string(m.num_experts) + " experts",
                     "use at most the number of experts");
  // The auxiliary load-balancing loss is computed only with output_router_logits.
  if (r.boolean("output_router_logits", false)) {
    m.load_balance = MoeLoadBalance::kAuxLoss;
    m.load_balance_coeff = r.non_negative_number("router_aux_loss_coef", 0.001);
  }
  for (const char* key : {"n_shared_experts", "routed_scaling_factor", "first_k_dense_replace",
                          "moe_layer_freq", "topk_method", "n_group", "topk_group", "scoring_func",
                          "ep_size", "num_nextn_predict_layers"})
    if (r.has(key))
      throw InputError(r.path(key), "is set, but this model type has no such field",
                       "remove it: DeepSeek-style routing is not imported for this model type");
}

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
  const int64_t default_positions = family == HfFamily::kLlama ? 2048
                                    : family == HfFamily::kMistral || family == HfFamily::kMixtral
                                        ? 4096 * 32
                                        : 32768;  // Qwen2 / Qwen2-MoE / Qwen3-MoE
  c.max_seq_len = r.positive_int("max_position_embeddings", default_positions);
  c.norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = r.rope_theta(10000.0);
  c.rope_scaling = r.rope_scaling();
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  c.qkv_bias = family == HfFamily::kQwen2;  // Qwen2Attention hard-codes bias on q/k/v
  if (family == HfFamily::kQwen2Moe) c.qkv_bias = r.boolean("qkv_bias", true);
  const bool decoupled_head_dim = family == HfFamily::kQwen3Moe;  // Qwen3: head_dim is its own
  if (decoupled_head_dim && r.has("head_dim")) {
    c.explicit_head_dim = r.positive_int("head_dim");
    if (c.n_heads * c.explicit_head_dim == c.dim) c.explicit_head_dim = 0;  // the usual size
  }

  if (!decoupled_head_dim && c.dim % c.n_heads != 0)
    throw InputError(r.path("num_attention_heads"),
                     "is " + std::to_string(c.n_heads) + ", which does not divide hidden_size " +
                         std::to_string(c.dim),
                     "use the published value; head size must be hidden_size / heads");
  if (c.n_heads % c.n_kv_heads != 0)
    throw InputError(r.path("num_key_value_heads"),
                     "is " + std::to_string(c.n_kv_heads) +
                         ", which does not divide num_attention_heads " + std::to_string(c.n_heads),
                     "use the published value (grouped-query attention needs a divisor)");
  if (!decoupled_head_dim && r.has("head_dim")) {
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
  if (family == HfFamily::kQwen3Moe && r.boolean("attention_bias", false))
    throw InputError(
        r.path("attention_bias"), "is true",
        "Qwen3 attention with biases is not supported (the published models have none)");
  if (family == HfFamily::kMixtral || family == HfFamily::kQwen3Moe ||
      family == HfFamily::kQwen2Moe)
    moe_from_hf(r, family, c);
  return c;
}

// NOTE [DeepSeek-V3 config.json fields]: DeepseekV3Config (transformers) and deepseek-ai's own
// config.json. Mapped: the sizes, MLA's ranks and head sizes (q_lora_rank null: 0),
// first_k_dense_replace, n_routed_experts / n_shared_experts / moe_intermediate_size,
// num_experts_per_tok, scoring_func, norm_topk_prob, routed_scaling_factor, topk_method
// ("noaux_tc": the expert bias at torchtitan's load_balance_coeff 1e-3; "greedy": none;
// "group_limited_greedy" refused: its groups score by their best expert), n_group / topk_group, rope_scaling "yarn" (factor
// and mscale_all_dim into the softmax scale). Refused by name: hidden_act other than silu,
// moe_layer_freq other than 1, attention_bias, num_key_value_heads other than the heads,
// rope_scaling types other than yarn, mscale != mscale_all_dim (HF scales cos / sin by their
// ratio), rope_interleave false. Read and not modelled, as torchtitan: num_nextn_predict_layers
// (the MTP layer, not counted), aux_loss_alpha / seq_aux (the sequence-wise auxiliary loss),
// ep_size, quantization_config (the checkpoint's fp8 storage). docs/models.md lists them.
ModelConfig deepseek_from_hf(const HfReader& r) {
  ModelConfig c;
  c.arch = ModelArch::kLlama;
  c.dim = r.positive_int("hidden_size");
  c.ffn_dim = r.positive_int("intermediate_size");
  c.n_layers = r.positive_int("num_hidden_layers");
  c.n_heads = r.positive_int("num_attention_heads");
  c.vocab_size = r.positive_int("vocab_size");
  c.n_kv_heads = r.positive_int("num_key_value_heads", c.n_heads);
  if (c.n_kv_heads != c.n_heads)
    throw InputError(r.path("num_key_value_heads"),
                     "is " + std::to_string(c.n_kv_heads) + ", not num_attention_heads " +
                         std::to_string(c.n_heads),
                     "MLA's k / v carry every head: use the published value");
  c.max_seq_len = r.positive_int("max_position_embeddings", 163840);
  c.norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = r.rope_theta(10000.0);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  MlaConfig& a = c.mla;
  // Absent fields take DeepseekV3Config's defaults (transformers); q_lora_rank null: no q LoRA.
  a.q_lora_rank = r.is_null("q_lora_rank") ? 0 : r.positive_int("q_lora_rank", 1536);
  a.kv_lora_rank = r.positive_int("kv_lora_rank", 512);
  a.qk_nope_head_dim = r.positive_int("qk_nope_head_dim", 128);
  a.qk_rope_head_dim = r.positive_int("qk_rope_head_dim", 64);
  a.v_head_dim = r.positive_int("v_head_dim", 128);
  auto refuse = [&](const std::string& key, const std::string& value, const std::string& fix) {
    throw InputError(r.path(key), "is " + value + ", which fullshard does not model", fix);
  };
  if (r.has("hidden_act") &&
      (!r.at("hidden_act").is_string() || r.at("hidden_act").get<std::string>() != "silu"))
    refuse("hidden_act", r.at("hidden_act").dump(), "use \"silu\" (DeepSeek-V3's SwiGLU)");
  if (r.boolean("attention_bias", false))
    refuse("attention_bias", "true", "use false (the published models have no biases)");
  if (!r.boolean("rope_interleave", true))
    refuse("rope_interleave", "false",
           "use true: torchtitan's deepseek_v3 rotates adjacent pairs (complex RoPE)");
  if (r.has("moe_layer_freq") && r.positive_int("moe_layer_freq") != 1)
    refuse("moe_layer_freq", r.at("moe_layer_freq").dump(), "use 1 (every layer after the dense)");
  const char* rope_key = r.has("rope_scaling")      ? "rope_scaling"
                         : r.has("rope_parameters") ? "rope_parameters"  // transformers 5.x
                                                    : nullptr;
  if (rope_key) {
    const auto& j = r.at(rope_key);
    const std::string p = r.path(rope_key);
    if (!j.is_object()) throw InputError(p, "is " + j.dump(), "give the published yarn object");
    const HfReader y(j, p);
    const char* type_key = y.has("rope_type") ? "rope_type" : "type";
    const std::string type =
        y.has(type_key) && y.at(type_key).is_string() ? y.at(type_key).get<std::string>() : "";
    if (type != "yarn" && type != "default")
      throw InputError(y.path(type_key),
                       "is " + (y.has(type_key) ? y.at(type_key).dump() : std::string("missing")),
                       "give \"yarn\" (DeepSeek-V3) or remove rope_scaling");
    if (type == "yarn") {
      a.rope_factor = y.positive_number("factor", 1.0);
      RopeScaling& sc = c.rope_scaling;  // NOTE [YaRN RoPE] in core/runtime/rope_args.h
      sc.yarn = true;
      sc.factor = a.rope_factor;
      sc.beta_fast = y.positive_number("beta_fast", 32);
      sc.beta_slow = y.positive_number("beta_slow", 1);
      sc.original_max_position_embeddings =
          static_cast<double>(y.positive_int("original_max_position_embeddings", 4096));
      if (sc.factor <= 1) sc = RopeScaling{};  // torchtitan: no YaRN at factor 1
      // HF's _compute_yarn_parameters scales cos / sin by get_mscale(factor, mscale) /
      // get_mscale(factor, mscale_all_dim) when both are set and non-zero, else by
      // get_mscale(factor); torchtitan scales neither. Only equal, non-zero mscales (ratio 1, as
      // DeepSeek-V3 publishes) are modelled; attention_factor and truncate would change them too.
      if (sc.yarn) {
        for (const char* k : {"mscale", "mscale_all_dim"})
          if (!y.has(k) || y.non_negative_number(k, 0.0) == 0)
            throw InputError(y.path(k), y.has(k) ? "is 0" : "is missing",
                             "give the published value (DeepSeek-V3: 1.0): without it HF scales "
                             "cos / sin by get_mscale(factor), which is not modelled");
        if (y.has("attention_factor"))
          throw InputError(y.path("attention_factor"), "is " + y.at("attention_factor").dump(),
                           "remove it: a cos / sin scale is not modelled");
        if (!y.boolean("truncate", true))
          throw InputError(y.path("truncate"), "is false",
                           "remove it: YaRN's untruncated correction range is not modelled");
      }
      a.mscale = y.non_negative_number("mscale_all_dim", 0.0);
      const double ms = y.non_negative_number("mscale", 1.0);
      if (a.mscale > 0 && ms != a.mscale)
        throw InputError(y.path("mscale"),
                         "is " + y.at("mscale").dump() + " but mscale_all_dim is " +
                             y.at("mscale_all_dim").dump(),
                         "HF then scales cos / sin by their ratio, which is not modelled: use "
                         "equal values (DeepSeek-V3: 1.0)");
      if (a.mscale == 0) a.rope_factor = 1.0;  // HF: no softmax factor without mscale_all_dim
    }
  }
  MoeConfig& m = c.moe;
  m.num_experts = r.positive_int("n_routed_experts");
  m.expert_dim = r.positive_int("moe_intermediate_size");
  m.shared_expert_dim =
      r.is_null("n_shared_experts") ? 0 : r.positive_int("n_shared_experts", 1) * m.expert_dim;
  m.top_k = r.positive_int("num_experts_per_tok");
  if (m.top_k > m.num_experts)
    throw InputError(r.path("num_experts_per_tok"),
                     "is " + std::to_string(m.top_k) + ", above the " +
                         std::to_string(m.num_experts) + " experts",
                     "use at most n_routed_experts");
  m.first_dense_layers = std::min<int64_t>(3, c.n_layers);  // DeepseekV3Config's default
  if (r.has("first_k_dense_replace")) {
    const auto& x = r.at("first_k_dense_replace");
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > c.n_layers)
      throw InputError(r.path("first_k_dense_replace"), "is " + x.dump(),
                       "give 0 to num_hidden_layers (" + std::to_string(c.n_layers) + ")");
    m.first_dense_layers = x.get<int64_t>();
  }
  const std::string score = r.has("scoring_func") && r.at("scoring_func").is_string()
                                ? r.at("scoring_func").get<std::string>()
                                : "sigmoid";
  if (score != "sigmoid" && score != "softmax")
    refuse("scoring_func", r.has("scoring_func") ? r.at("scoring_func").dump() : score,
           "use \"sigmoid\" or \"softmax\"");
  m.score_func = score == "sigmoid" ? MoeScoreFunc::kSigmoid : MoeScoreFunc::kSoftmax;
  m.route_norm = r.boolean("norm_topk_prob", true);
  m.route_scale = r.positive_number("routed_scaling_factor", 2.5);
  m.num_expert_groups = r.positive_int("n_group", 8);
  m.num_limited_groups = r.positive_int("topk_group", 4);
  if (m.num_experts % m.num_expert_groups != 0)
    throw InputError(r.path("n_group"),
                     "is " + std::to_string(m.num_expert_groups) + ", which does not divide the " +
                         std::to_string(m.num_experts) + " routed experts",
                     "use the published value (DeepSeek-V3: 8)");
  if (m.num_limited_groups > m.num_expert_groups)
    throw InputError(r.path("topk_group"),
                     "is " + std::to_string(m.num_limited_groups) + ", above n_group " +
                         std::to_string(m.num_expert_groups),
                     "use at most n_group (DeepSeek-V3: 4 of 8)");
  const std::string method = r.has("topk_method") && r.at("topk_method").is_string()
                                 ? r.at("topk_method").get<std::string>()
                                 : "noaux_tc";
  if (method == "noaux_tc") {
    m.load_balance = MoeLoadBalance::kExpertBias;
    m.load_balance_coeff = 1e-3;  // torchtitan's make_moe_config default
  } else if (method == "greedy") {
    m.num_expert_groups = m.num_limited_groups = 1;  // greedy ignores the groups
  } else if (method == "group_limited_greedy") {
    // DeepSeek's reference scores a group by its best expert without the bias (amax), where
    // torchtitan, whose router fullshard builds, always sums the group's top two.
    refuse("topk_method", "\"group_limited_greedy\"",
           "it scores groups by their best expert, which fullshard's router (torchtitan's: the "
           "sum of each group's top two) does not build; use \"noaux_tc\" or \"greedy\"");
  } else {
    refuse("topk_method", r.has("topk_method") ? r.at("topk_method").dump() : method,
           "use \"noaux_tc\" (DeepSeek-V3) or \"greedy\"");
  }
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

ModelConfig model_from_hf_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    throw InputError(where, "is " + std::string(j.type_name()) + ", not a JSON object",
                     "pass a Hugging Face config.json");
  const HfReader r(j, where);
  const HfArch& arch = r.arch();
  ModelConfig c = arch.family == HfFamily::kGpt2         ? gpt2_from_hf(r)
                  : arch.family == HfFamily::kDeepseekV3 ? deepseek_from_hf(r)
                                                         : llama_from_hf(r, arch.family);
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

}  // namespace fullshard
