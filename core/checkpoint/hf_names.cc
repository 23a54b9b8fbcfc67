#include "core/checkpoint/hf_names.h"

#include <regex>
#include <utility>

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

}  // namespace

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
    if (!base || base->transpose) return std::nullopt;
    base->name = base->name.substr(0, base->name.size() - std::string(".weight").size()) + suffix;
    return base;
  }
  const bool llama = arch == "llama";
  if (!llama && arch != "gpt2") return std::nullopt;
  static const std::regex block(R"(layers\.([0-9]+)\.(.+))");
  std::smatch m;
  if (std::regex_match(fqn, m, block)) {
    const std::string prefix =
        llama ? "model.layers." + m[1].str() + "." : "transformer.h." + m[1].str() + ".";
    const Rule* b = llama ? std::begin(kLlamaBlock) : std::begin(kGpt2Block);
    const Rule* e = llama ? std::end(kLlamaBlock) : std::end(kGpt2Block);
    for (const Rule* r = b; r != e; ++r)
      if (m[2].str() == r->ours) return HfTensorName{prefix + r->hf, r->transpose};
    return std::nullopt;
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

}  // namespace fullshard
