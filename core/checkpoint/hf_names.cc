#include "core/checkpoint/hf_names.h"

#include <regex>
#include <utility>

#include "core/model/model_config.h"

namespace fullshard {
namespace {

// (fullshard suffix inside a block, Hugging Face suffix, transpose)
struct Rule {
  const char* ours;
  const char* hf;
  bool transpose;
};

constexpr Rule kLlamaBlock[] = {
    {"attention_norm.weight", "input_layernorm.weight", false},
    {"attention.wq.weight", "self_attn.q_proj.weight", false},
    {"attention.wk.weight", "self_attn.k_proj.weight", false},
    {"attention.wv.weight", "self_attn.v_proj.weight", false},
    {"attention.wq.bias", "self_attn.q_proj.bias", false},
    {"attention.wk.bias", "self_attn.k_proj.bias", false},
    {"attention.wv.bias", "self_attn.v_proj.bias", false},
    {"attention.wo.weight", "self_attn.o_proj.weight", false},
    {"ffn_norm.weight", "post_attention_layernorm.weight", false},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight", false},
    {"feed_forward.w2.weight", "mlp.down_proj.weight", false},
    {"feed_forward.w3.weight", "mlp.up_proj.weight", false},
    // Qwen3's per-head q / k RMSNorm (a deepseek_v3 model's q_norm is MLA's, below)
    {"attention.k_norm.weight", "self_attn.k_norm.weight", false},
};
// DeepSeek-V3's multi-head latent attention (core/model/mla_attention.cc): DeepseekV3Attention.
constexpr Rule kMlaAttention[] = {
    {"attention.wq_a.weight", "self_attn.q_a_proj.weight", false},
    {"attention.q_norm.weight", "self_attn.q_a_layernorm.weight", false},
    {"attention.wq_b.weight", "self_attn.q_b_proj.weight", false},
    {"attention.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight", false},
    {"attention.kv_norm.weight", "self_attn.kv_a_layernorm.weight", false},
    {"attention.wkv_b.weight", "self_attn.kv_b_proj.weight", false},
};
// The MoE block (NOTE [Hugging Face names of experts]): Qwen3-MoE's and DeepSeek-V3's names,
// then Mixtral's. Routed experts are per_expert ("{e}").
constexpr Rule kMlpMoe[] = {
    {"moe.router.gate.weight", "mlp.gate.weight", false},
    {"moe.expert_bias", "mlp.gate.e_score_correction_bias", false},
    {"moe.experts.w1", "mlp.experts.{e}.gate_proj.weight", false},
    {"moe.experts.w2", "mlp.experts.{e}.down_proj.weight", false},
    {"moe.experts.w3", "mlp.experts.{e}.up_proj.weight", false},
    {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight", false},
    {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight", false},
    {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight", false},
};
constexpr Rule kMixtralMoe[] = {
    {"moe.router.gate.weight", "block_sparse_moe.gate.weight", false},
    {"moe.experts.w1", "block_sparse_moe.experts.{e}.w1.weight", false},
    {"moe.experts.w2", "block_sparse_moe.experts.{e}.w2.weight", false},
    {"moe.experts.w3", "block_sparse_moe.experts.{e}.w3.weight", false},
};
constexpr Rule kGpt2Block[] = {
    {"ln_1.weight", "ln_1.weight", false},
    {"ln_1.bias", "ln_1.bias", false},
    {"attn.c_attn.weight", "attn.c_attn.weight", true},
    {"attn.c_attn.bias", "attn.c_attn.bias", false},
    {"attn.c_proj.weight", "attn.c_proj.weight", true},
    {"attn.c_proj.bias", "attn.c_proj.bias", false},
    {"ln_2.weight", "ln_2.weight", false},
    {"ln_2.bias", "ln_2.bias", false},
    {"mlp.c_fc.weight", "mlp.c_fc.weight", true},
    {"mlp.c_fc.bias", "mlp.c_fc.bias", false},
    {"mlp.c_proj.weight", "mlp.c_proj.weight", true},
    {"mlp.c_proj.bias", "mlp.c_proj.bias", false},
};

template <size_t N>
const Rule* find_rule(const Rule (&rules)[N], const std::string& ours) {
  for (const Rule& r : rules)
    if (ours == r.ours) return &r;
  return nullptr;
}

// The rule for `ours` (the name inside block layers.N) of a Llama-family model named as `arch`.
const Rule* llama_family_rule(const std::string& arch, const std::string& ours) {
  static constexpr Rule kQwenQNorm = {"attention.q_norm.weight", "self_attn.q_norm.weight", false};
  const bool mla = arch == "deepseek_v3";
  if (mla)
    if (const Rule* r = find_rule(kMlaAttention, ours)) return r;
  if (!mla && ours == kQwenQNorm.ours) return &kQwenQNorm;
  if (const Rule* r = find_rule(kLlamaBlock, ours)) return r;
  return arch == "mixtral" ? find_rule(kMixtralMoe, ours) : find_rule(kMlpMoe, ours);
}

}  // namespace

std::string HfTensorName::expert_name(int64_t e) const {
  std::string n = name;
  const size_t at = n.find("{e}");
  if (at != std::string::npos) n.replace(at, 3, std::to_string(e));
  return n;
}

std::string hf_arch(const ModelConfig& c) {
  if (c.arch == ModelArch::kGpt2) return "gpt2";
  if (c.mla.enabled()) return "deepseek_v3";
  if (!c.moe.enabled()) return "llama";
  if (c.name.find("mixtral") != std::string::npos) return "mixtral";
  if (c.qk_norm) return "qwen3_moe";
  const bool deepseek =
      c.moe.shared_expert_dim > 0 || c.moe.load_balance == MoeLoadBalance::kExpertBias;
  return deepseek ? "deepseek_v3" : "qwen3_moe";
}

std::optional<HfTensorName> hf_tensor_name(const std::string& arch, const std::string& fqn) {
  // A LoRA adapter (core/model/lora.h): its linear's Hugging Face name with PEFT's
  // ".lora_A.weight" / ".lora_B.weight" in place of ".weight" (PEFT's files add
  // "base_model.model." in front).
  for (const char* ab : {".lora_A.weight", ".lora_B.weight"}) {
    const std::string suffix(ab);
    if (fqn.size() <= suffix.size() ||
        fqn.compare(fqn.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    auto base = hf_tensor_name(arch, fqn.substr(0, fqn.size() - suffix.size()) + ".weight");
    if (!base || base->transpose || base->per_expert) return std::nullopt;
    base->name = base->name.substr(0, base->name.size() - std::string(".weight").size()) + suffix;
    return base;
  }
  const bool llama =
      arch == "llama" || arch == "mixtral" || arch == "qwen3_moe" || arch == "deepseek_v3";
  if (!llama && arch != "gpt2") return std::nullopt;
  static const std::regex block(R"(layers\.([0-9]+)\.(.+))");
  std::smatch m;
  if (std::regex_match(fqn, m, block)) {
    const std::string prefix =
        llama ? "model.layers." + m[1].str() + "." : "transformer.h." + m[1].str() + ".";
    const Rule* r = llama ? llama_family_rule(arch, m[2].str()) : find_rule(kGpt2Block, m[2].str());
    if (!r) return std::nullopt;
    const std::string hf = r->hf;
    return HfTensorName{prefix + hf, r->transpose, hf.find("{e}") != std::string::npos};
  }
  static const std::pair<const char*, const char*> kLlamaTop[] = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::pair<const char*, const char*> kGpt2Top[] = {
      {"wte.weight", "transformer.wte.weight"},
      {"wpe.weight", "transformer.wpe.weight"},
      {"ln_f.weight", "transformer.ln_f.weight"},
      {"ln_f.bias", "transformer.ln_f.bias"}};
  if (llama) {
    for (const auto& [o, h] : kLlamaTop)
      if (fqn == o) return HfTensorName{h, false};
  } else {
    for (const auto& [o, h] : kGpt2Top)
      if (fqn == o) return HfTensorName{h, false};
  }
  return std::nullopt;
}

bool hf_rope_pairing_differs(const ModelConfig& c) {
  if (c.arch != ModelArch::kLlama) return false;
  const bool file_adjacent = hf_arch(c) == "deepseek_v3";
  return file_adjacent != (c.implementation.rope == RopeImpl::kComplex);
}

std::vector<int64_t> hf_rope_row_order(const ModelConfig& c, const std::string& fqn,
                                       int64_t rows) {
  if (!hf_rope_pairing_differs(c)) return {};
  static const std::regex block(R"(layers\.[0-9]+\.(.+))");
  std::smatch m;
  if (!std::regex_match(fqn, m, block)) return {};
  const std::string ours = m[1].str();
  int64_t period = 0, offset = 0, r = 0;  // each `period` rows: rotary rows [offset, offset + r)
  if (c.mla.enabled()) {
    const MlaConfig& a = c.mla;
    if (ours == "attention.wq.weight" || ours == "attention.wq_b.weight") {
      period = a.qk_head_dim(), offset = a.qk_nope_head_dim, r = a.qk_rope_head_dim;
    } else if (ours == "attention.wkv_a.weight") {
      period = a.kv_lora_rank + a.qk_rope_head_dim, offset = a.kv_lora_rank, r = a.qk_rope_head_dim;
    }
  } else {
    for (const char* n : {"attention.wq.weight", "attention.wk.weight", "attention.wq.bias",
                          "attention.wk.bias", "attention.q_norm.weight", "attention.k_norm.weight"})
      if (ours == n) period = r = c.head_dim();
  }
  if (period == 0 || rows % period != 0 || r % 2 != 0) return {};
  const bool model_adjacent = c.implementation.rope == RopeImpl::kComplex;
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) order[static_cast<size_t>(row)] = row;
  for (int64_t p = 0; p < rows; p += period)
    for (int64_t i = 0; i < r / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t adjacent = p + offset + 2 * i + j, half = p + offset + j * (r / 2) + i;
        order[static_cast<size_t>(model_adjacent ? adjacent : half)] = model_adjacent ? half : adjacent;
      }
  return order;
}

}  // namespace fullshard
