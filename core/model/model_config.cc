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
#include "core/model/config_path.h"

namespace fullshard {
namespace {

// ---------------------------------------------------------------- zoo
// NOTE [Zoo sources]: every entry is the published Hugging Face config.json of the *base*
// checkpoint (meta-llama/Llama-2-7b-hf, meta-llama/Llama-3.1-8B, mistralai/Mistral-7B-v0.3,
// Qwen/Qwen2.5-7B, openai-community/gpt2, ...). "mistral-7b" is v0.3 (vocab 32768, rope
// theta 1e6, no sliding window); v0.1 is kept as "mistral-7b-v0.1". Qwen2.5 ties embeddings
// only at 0.5B/1.5B/3B, so the 7B and 14B here are untied. tests/unit/model_config_test.cc
// checks every parameter count against the published number.
// NOTE [MoE zoo sources]: mixtral-8x7b is mistralai/Mixtral-8x7B-v0.1 (8 experts of
// intermediate_size 14336, top-2 renormalised: 46,702,792,704 parameters); qwen3-30b-a3b is
// Qwen/Qwen3-30B-A3B (128 experts of moe_intermediate_size 768, top-8 with norm_topk_prob,
// head_dim 128 with 32 heads of a 2048 hidden size, q/k RMSNorms: 30,532,122,624). Their
// published configs leave output_router_logits false, so no auxiliary loss is computed.
// tiny-moe is ours: 4 experts, top-2, one shared expert, small enough to run for real.
// NOTE [DeepSeek zoo sources]: deepseek-v3-671b is deepseek-ai/DeepSeek-V3's config.json and
// torchtitan's "671B" flavour (torchtitan/models/deepseek_v3/__init__.py at pytorch/torchtitan@
// b5bcd76): MLA (q_lora_rank 1536, kv_lora_rank 512, heads of 128 + 64 RoPE, v 128), the first 3
// layers dense (18432), then 256 routed experts of 2048 and one shared, sigmoid scores, top-8
// normalised and scaled by 2.5 from 4 of 8 groups, the expert bias (torchtitan's default
// load_balance_coeff 1e-3), YaRN factor 40 with mscale 1: 671,026,404,352 parameters, the main
// model only: the multi-token-prediction layer (num_nextn_predict_layers 1, 14B in the published
// checkpoint) is not counted, as torchtitan trains none by default (num_mtp_layers 0), nor the
// expert bias, a buffer. deepseek-v3-16b is torchtitan's "16B" flavour (DeepSeek-V2-Lite's sizes:
// q without LoRA, 64 experts of 1408 and 2 shared, top-6 softmax, first layer dense 10944, mscale
// 0.70): 15,706,484,224. tiny-deepseek is ours: the same layout at tiny-moe's sizes, to train.
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
  // Mixtures of experts (NOTE [MoE zoo sources]).
  llama({.name = "mixtral-8x7b", .vocab_size = 32000, .dim = 4096, .n_layers = 32, .n_heads = 32,
         .n_kv_heads = 8, .ffn_dim = 14336, .max_seq_len = 32768, .norm_eps = 1e-5,
         .rope_theta = 1e6,
         .moe = {.num_experts = 8, .top_k = 2, .expert_dim = 14336, .route_norm = true}});
  llama({.name = "qwen3-30b-a3b", .vocab_size = 151936, .dim = 2048, .n_layers = 48,
         .n_heads = 32, .n_kv_heads = 4, .ffn_dim = 6144, .max_seq_len = 40960, .norm_eps = 1e-6,
         .rope_theta = 1e6, .explicit_head_dim = 128, .qk_norm = true,
         .moe = {.num_experts = 128, .top_k = 8, .expert_dim = 768, .route_norm = true}});
  // DeepSeek-V3 (NOTE [DeepSeek zoo sources]).
  llama({.name = "deepseek-v3-671b", .vocab_size = 129280, .dim = 7168, .n_layers = 61,
         .n_heads = 128, .n_kv_heads = 128, .ffn_dim = 18432, .max_seq_len = 163840,
         .norm_eps = 1e-6, .rope_theta = 1e4,
         .rope_scaling = {.factor = 40, .original_max_position_embeddings = 4096, .yarn = true},
         .moe = {.num_experts = 256, .top_k = 8, .expert_dim = 2048, .shared_expert_dim = 2048,
                 .score_func = MoeScoreFunc::kSigmoid, .route_norm = true, .route_scale = 2.5,
                 .load_balance = MoeLoadBalance::kExpertBias, .load_balance_coeff = 1e-3,
                 .num_expert_groups = 8, .num_limited_groups = 4, .first_dense_layers = 3},
         .mla = {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                 .qk_rope_head_dim = 64, .v_head_dim = 128, .rope_factor = 40, .mscale = 1.0}});
  llama({.name = "deepseek-v3-16b", .vocab_size = 102400, .dim = 2048, .n_layers = 27,
         .n_heads = 16, .n_kv_heads = 16, .ffn_dim = 10944, .max_seq_len = 16384,
         .norm_eps = 1e-5, .rope_theta = 1e4,
         .rope_scaling = {.factor = 40, .original_max_position_embeddings = 4096, .yarn = true},
         .moe = {.num_experts = 64, .top_k = 6, .expert_dim = 1408, .shared_expert_dim = 2816,
                 .load_balance = MoeLoadBalance::kExpertBias, .load_balance_coeff = 1e-3,
                 .first_dense_layers = 1},
         .mla = {.kv_lora_rank = 512, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                 .v_head_dim = 128, .rope_factor = 40, .mscale = 0.70}});
  gpt2({.name = "gpt2-124m", .dim = 768, .n_layers = 12, .n_heads = 12});
  gpt2({.name = "gpt2-355m", .dim = 1024, .n_layers = 24, .n_heads = 16});
  gpt2({.name = "gpt2-774m", .dim = 1280, .n_layers = 36, .n_heads = 20});
  gpt2({.name = "gpt2-1.5b", .dim = 1600, .n_layers = 48, .n_heads = 25});
  // Tiny configs for tests and examples: every dimension small enough to run for real.
  llama({.name = "tiny-llama", .vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
         .n_kv_heads = 2, .ffn_dim = 128, .max_seq_len = 128, .norm_eps = 1e-5, .rope_theta = 1e4});
  llama({.name = "tiny-moe", .vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
         .n_kv_heads = 2, .ffn_dim = 128, .max_seq_len = 128, .norm_eps = 1e-5, .rope_theta = 1e4,
         .moe = {.num_experts = 4, .top_k = 2, .expert_dim = 32, .shared_expert_dim = 32,
                 .route_norm = true}});
  llama({.name = "tiny-deepseek", .vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
         .n_kv_heads = 4, .ffn_dim = 128, .max_seq_len = 128, .norm_eps = 1e-5, .rope_theta = 1e4,
         .moe = {.num_experts = 4, .top_k = 2, .expert_dim = 32, .shared_expert_dim = 32,
                 .score_func = MoeScoreFunc::kSigmoid, .route_norm = true, .route_scale = 2.5,
                 .first_dense_layers = 1},
         .mla = {.q_lora_rank = 32, .kv_lora_rank = 32, .qk_nope_head_dim = 16,
                 .qk_rope_head_dim = 8, .v_head_dim = 16}});
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
// The feed-forward of one Llama-style layer: dense SwiGLU (gate / up D x F, down F x D) or,
// on a MoE layer, the router's gate (E x D), the grouped experts (w1 / w3 [E, Fe, D], w2 [E, D,
// Fe]) and the shared FFN (3 D Fs, with qwen2_moe's D -> 1 gate).
void add_ffn(CheckedSum& layer, const ModelConfig& c, bool moe_layer) {
  const int64_t d = c.dim, f = c.ffn_dim;
  if (!moe_layer) {
    layer.add(d, f);
    layer.add(d, f);
    layer.add(f, d);
    if (c.linear_bias) {
      layer.add(f, 2);
      layer.add(d);
    }
    return;
  }
  const MoeConfig& m = c.moe;
  CheckedSum expert;  // one expert's w1, w2, w3
  expert.add(d, m.expert_dim);
  expert.add(d, m.expert_dim);
  expert.add(m.expert_dim, d);
  if (!expert.value()) return layer.add(std::numeric_limits<int64_t>::max(), 2);  // overflow
  layer.add(*expert.value(), m.num_experts);
  layer.add(d, m.num_experts);  // router.gate
  layer.add(d, m.shared_expert_dim);
  layer.add(d, m.shared_expert_dim);
  layer.add(m.shared_expert_dim, d);
  if (m.shared_expert_gate) layer.add(d);
}

// nullopt when the count does not fit in int64. Requires n_heads >= 1. Every term goes
// through CheckedSum so that unvalidated, absurd sizes cannot overflow silently.
std::optional<int64_t> checked_parameter_count(const ModelConfig& c) {
  const int64_t d = c.dim, f = c.ffn_dim, v = c.vocab_size;
  CheckedSum widths;  // width of the k and v projections, then of q (n_heads * head_dim)
  widths.add(c.n_kv_heads, c.head_dim());
  if (!widths.value()) return std::nullopt;
  const int64_t kv = *widths.value();
  CheckedSum q_width;
  q_width.add(c.n_heads, c.head_dim());
  if (!q_width.value()) return std::nullopt;
  const int64_t q = *q_width.value();  // == d unless head_dim is decoupled (Qwen3)
  const bool lb = c.linear_bias;
  CheckedSum layer;
  CheckedSum total;
  if (c.mla.enabled()) {  // multi-head latent attention (core/model/mla_attention.cc)
    const MlaConfig& m = c.mla;
    CheckedSum qk_width, kv_width, v_width;
    qk_width.add(c.n_heads, m.qk_head_dim());
    kv_width.add(c.n_heads, m.qk_nope_head_dim + m.v_head_dim);
    v_width.add(c.n_heads, m.v_head_dim);
    if (!qk_width.value() || !kv_width.value() || !v_width.value()) return std::nullopt;
    if (m.q_lora_rank == 0) {
      layer.add(d, *qk_width.value());  // wq
    } else {
      layer.add(d, m.q_lora_rank);                  // wq_a
      layer.add(m.q_lora_rank);                     // q_norm
      layer.add(m.q_lora_rank, *qk_width.value());  // wq_b
    }
    layer.add(d, m.kv_lora_rank + m.qk_rope_head_dim);  // wkv_a
    layer.add(m.kv_lora_rank);                          // kv_norm
    layer.add(m.kv_lora_rank, *kv_width.value());       // wkv_b
    layer.add(*v_width.value(), d);                     // wo
  } else {
    // Attention: q is q x D, k and v are kv x D, o is D x q (GPT-2 fuses q/k/v into c_attn, whose
    // Conv1D weight is [D, D + 2 kv]; the count is the same).
    layer.add(d, q);
    layer.add(d, kv);
    layer.add(d, kv);
    layer.add(d, q);
  }
  if (c.qkv_bias || lb) {  // Qwen2: bias on q/k/v only; GPT-2: on every linear
    layer.add(q);
    layer.add(kv);
    layer.add(kv);
  }
  if (lb) layer.add(d);                       // o / attn.c_proj bias
  if (c.qk_norm) layer.add(c.head_dim(), 2);  // Qwen3 q_norm, k_norm
  int64_t moe_layers = 0;
  if (c.arch == ModelArch::kLlama) {
    layer.add(d, 2);  // input_layernorm, post_attention_layernorm (RMSNorm: weight only)
    total.add(v, d);  // embed_tokens
    total.add(d);     // final norm
    moe_layers = c.moe.moe_layer_count(c.n_layers);
    CheckedSum dense_ffn, moe_ffn;
    add_ffn(dense_ffn, c, false);
    add_ffn(moe_ffn, c, true);
    if (!dense_ffn.value() || !moe_ffn.value()) return std::nullopt;
    total.add(*dense_ffn.value(), c.n_layers - moe_layers);
    total.add(*moe_ffn.value(), moe_layers);
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

// The MoE fields' ranges (model.moe.*); nothing to check for a dense model.
void validate_moe(const ModelConfig& c, const std::string& where) {
  const MoeConfig& m = c.moe;
  auto bad = [&](const char* field, const std::string& value, const std::string& fix) {
    throw InputError(field_path(where, std::string("moe.") + field), "is " + value, fix);
  };
  if (m.num_experts < 0)
    bad("num_experts", std::to_string(m.num_experts), "give 0 (dense) or more experts");
  if (!m.enabled()) return;
  if (m.top_k < 1 || m.top_k > m.num_experts)
    bad("top_k", std::to_string(m.top_k),
        "give 1 to num_experts (" + std::to_string(m.num_experts) + ")");
  if (m.expert_dim < 1) bad("expert_dim", std::to_string(m.expert_dim), "it must be >= 1");
  if (m.shared_expert_dim < 0)
    bad("shared_expert_dim", std::to_string(m.shared_expert_dim), "give 0 (none) or more");
  if (m.shared_expert_gate && m.shared_expert_dim == 0)
    bad("shared_expert_gate", "true without a shared expert", "set shared_expert_dim too");
  if (!(m.route_scale > 0) || !std::isfinite(m.route_scale))
    bad("route_scale", std::to_string(m.route_scale), "give a positive factor such as 1");
  if (!(m.load_balance_coeff >= 0) || !std::isfinite(m.load_balance_coeff))
    bad("load_balance_coeff", std::to_string(m.load_balance_coeff), "give a number >= 0");
  if (m.interleave_step < 1)
    bad("interleave_step", std::to_string(m.interleave_step), "it must be >= 1 (1: every layer)");
  if (m.first_dense_layers < 0 || m.first_dense_layers > c.n_layers)
    bad("first_dense_layers", std::to_string(m.first_dense_layers),
        "give 0 to n_layers (" + std::to_string(c.n_layers) + ")");
  for (int64_t l : m.dense_layers)
    if (l < 0 || l >= c.n_layers)
      bad("dense_layers", "holding " + std::to_string(l),
          "give layer indices from 0 to " + std::to_string(c.n_layers - 1));
  if (m.num_expert_groups < 1 || m.num_experts % m.num_expert_groups != 0)
    bad("num_expert_groups", std::to_string(m.num_expert_groups),
        "give a divisor of num_experts (" + std::to_string(m.num_experts) + "); 1: no groups");
  if (m.num_limited_groups < 1 || m.num_limited_groups > m.num_expert_groups)
    bad("num_limited_groups", std::to_string(m.num_limited_groups),
        "give 1 to num_expert_groups (" + std::to_string(m.num_expert_groups) + ")");
  // torchtitan's _get_node_limited_routing_scores scores a group by its top 2 experts, and
  // the top-k must fit in the kept groups (NOTE [Expert bias] in core/model/expert_bias.h).
  if (m.num_expert_groups > 1 && m.num_experts / m.num_expert_groups < 2)
    bad("num_expert_groups", std::to_string(m.num_expert_groups),
        "give groups of 2 or more experts (num_experts " + std::to_string(m.num_experts) + ")");
  if (m.num_expert_groups > 1 &&
      m.num_limited_groups * (m.num_experts / m.num_expert_groups) < m.top_k)
    bad("num_limited_groups", std::to_string(m.num_limited_groups),
        "keep enough groups for top_k " + std::to_string(m.top_k) + " experts");
  if (m.load_balance == MoeLoadBalance::kExpertBias && !(m.load_balance_coeff > 0))
    bad("load_balance_coeff", std::to_string(m.load_balance_coeff),
        "give a positive update rate for the expert bias (torchtitan: 1e-3)");
  if (m.token_group_align < 1)
    bad("token_group_align", std::to_string(m.token_group_align), "give 8 (bf16), 16 or 32");
}

// The MLA fields' ranges (model.mla.*) and what MLA replaces; nothing for other attention.
void validate_mla(const ModelConfig& c, const std::string& where) {
  const MlaConfig& m = c.mla;
  auto bad = [&](const char* field, const std::string& value, const std::string& fix) {
    throw InputError(field_path(where, std::string("mla.") + field), "is " + value, fix);
  };
  if (m.kv_lora_rank < 0)
    bad("kv_lora_rank", std::to_string(m.kv_lora_rank), "give 0 (no MLA) or a positive rank");
  if (!m.enabled()) return;
  if (m.q_lora_rank < 0)
    bad("q_lora_rank", std::to_string(m.q_lora_rank), "give 0 (q = wq(x)) or a positive rank");
  if (m.qk_nope_head_dim < 1)
    bad("qk_nope_head_dim", std::to_string(m.qk_nope_head_dim), "it must be >= 1");
  if (m.qk_rope_head_dim < 2 || m.qk_rope_head_dim % 2 != 0)
    bad("qk_rope_head_dim", std::to_string(m.qk_rope_head_dim), "give an even size >= 2");
  if (m.v_head_dim < 1) bad("v_head_dim", std::to_string(m.v_head_dim), "it must be >= 1");
  if (!(m.rope_factor >= 1) || !std::isfinite(m.rope_factor))
    bad("rope_factor", std::to_string(m.rope_factor), "give 1 (no YaRN) or the YaRN factor");
  if (!(m.mscale >= 0) || !std::isfinite(m.mscale))
    bad("mscale", std::to_string(m.mscale), "give a number >= 0 (DeepSeek-V3: 1)");
  const bool yarn = c.rope_scaling.enabled() && c.rope_scaling.yarn;
  if (m.rope_factor > 1 && (!yarn || c.rope_scaling.factor != m.rope_factor))
    bad("rope_factor", std::to_string(m.rope_factor),
        "give the YaRN RoPE scaling with the same factor (rope_scaling), or 1");
  if (c.arch != ModelArch::kLlama || c.qk_norm || c.qkv_bias || c.explicit_head_dim > 0)
    throw InputError(field_path(where, "mla"),
                     "is set with GPT-2, q/k norms, q/k/v biases or a decoupled head_dim",
                     "MLA replaces the whole attention of a Llama-style model");
  if (c.n_kv_heads != c.n_heads)
    throw InputError(
        field_path(where, "n_kv_heads"),
        "is " + std::to_string(c.n_kv_heads) + " with MLA, whose k / v have every head",
        "set n_kv_heads equal to n_heads (" + std::to_string(c.n_heads) + ")");
}

}  // namespace

// ---------------------------------------------------------------- public API

std::string field_path(const std::string& where, const std::string& field) {
  if (where.empty()) return field;
  const bool is_file = where.find('/') != std::string::npos ||
                       (where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0);
  return where + (is_file ? ": " : ".") + field;
}

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
  if (c.explicit_head_dim == 0 && !c.mla.enabled() && c.dim % c.n_heads != 0)
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
  if (c.explicit_head_dim < 0)
    throw InputError(field_path(where, "head_dim"), "is " + std::to_string(c.explicit_head_dim),
                     "give a positive head size, or leave it out for dim / n_heads");
  if (c.arch == ModelArch::kGpt2 && (c.explicit_head_dim > 0 || c.qk_norm || c.moe.enabled()))
    throw InputError(field_path(where, c.moe.enabled() ? "moe" : "head_dim"),
                     "is set for a GPT-2 model",
                     "decoupled heads, q/k norms and experts are Llama-style");
  validate_moe(c, where);
  validate_mla(c, where);
  if (!checked_parameter_count(c))
    throw InputError(where.empty() ? "model" : where, "has more than 2^63 parameters",
                     "check the sizes; they are far beyond any real model");
}

}  // namespace fullshard
