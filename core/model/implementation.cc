#include "core/model/implementation.h"

#include <map>

namespace fullshard {

// NOTE [Implementation presets]: each named program does what its sources do at a pinned commit
// (each file and line read: docs/scenario-format.md, "Where each preset was read").
// - fullshard: the ops fullshard modelled before model.implementation existed (the default).
// - torchtitan-2024 (pytorch/torchtitan@3f20451): fp32-cast loss outside the model, `del pred`
//   before backward, eager RMSNorm, complex RoPE, repeat_kv, causal SDPA, no compile.
// - torchtitan-2024-04 (pytorch/torchtitan@1ea476e9, whose A100 rows tools/validate checks): fp32
//   logits returned by the model and kept through backward; fused RMSNorm (eager in the 70B
//   configs), complex RoPE, repeat_kv.
// - torchtitan (pytorch/torchtitan@b5bcd76): ChunkedLossWrapper, nn.RMSNorm, ComplexRoPE, SDPA with
//   enable_gqa and cuDNN first, the loss over the global valid tokens with FSDP2's gradient
//   division off.
// - hf-transformers (LlamaForCausalLM): eager RMSNorm, rotate-half RoPE in the model dtype,
//   enable_gqa, fp32-cast loss, logits held until after backward.
namespace {

struct Preset {
  const char* name;
  ModelImplementation impl;
};

std::vector<Preset> make_presets() {
  std::vector<Preset> v;
  ModelImplementation fs;
  v.push_back({"fullshard", fs});
  ModelImplementation t2404;
  t2404.preset = "torchtitan-2024-04";
  t2404.loss = LossImpl::kFp32Output;
  t2404.keep_logits = true;
  t2404.rope = RopeImpl::kComplex;
  t2404.gqa = GqaImpl::kRepeatKV;
  v.push_back({"torchtitan-2024-04", t2404});
  ModelImplementation t24;
  t24.preset = "torchtitan-2024";
  t24.rms_norm = NormImpl::kEager;
  t24.rope = RopeImpl::kComplex;
  t24.gqa = GqaImpl::kRepeatKV;
  v.push_back({"torchtitan-2024", t24});
  ModelImplementation tt;
  tt.preset = "torchtitan";
  tt.loss = LossImpl::kChunked;
  tt.rope = RopeImpl::kComplex;
  tt.attention = AttentionImpl::kCudnn;
  tt.loss_normalization = LossNormalization::kGlobalValidTokens;
  v.push_back({"torchtitan", tt});
  ModelImplementation hf;
  hf.preset = "hf-transformers";
  hf.keep_logits = true;
  hf.rms_norm = NormImpl::kEager;
  hf.rope = RopeImpl::kRotateHalf;
  v.push_back({"hf-transformers", hf});
  return v;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = make_presets();
  return p;
}

const std::map<std::string, std::vector<std::string>>& value_table() {
  static const std::map<std::string, std::vector<std::string>> t = {
      {"loss", {"fp32_logits", "bf16_logits", "fp32_output", "chunked"}},
      {"rms_norm", {"fused", "eager"}},
      {"rope", {"fused", "complex", "rotate_half"}},
      {"gqa", {"native", "repeat_kv"}},
      {"attention", {"flash", "cudnn", "efficient"}},
      {"loss_normalization", {"mean", "global_valid_tokens"}},
  };
  return t;
}

}  // namespace

const std::vector<std::string>& implementation_presets() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& p : presets()) n.push_back(p.name);
    return n;
  }();
  return names;
}

std::optional<ModelImplementation> find_implementation_preset(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return p.impl;
  return std::nullopt;
}

std::vector<std::string> unbuilt_variants(const ModelImplementation& m) {
  (void)m;  // every variant is built (compile = true for Llama only: parse_model refuses GPT-2)
  return {};
}

const std::vector<std::string>& implementation_fields() {
  static const std::vector<std::string> f = {"loss",      "loss_chunks", "keep_logits",
                                             "rms_norm",  "rope",        "gqa",
                                             "attention", "compile",     "loss_normalization"};
  return f;
}

const std::vector<std::string>& implementation_values(const std::string& field) {
  static const std::vector<std::string> none;
  auto it = value_table().find(field);
  return it == value_table().end() ? none : it->second;
}

bool set_implementation_value(ModelImplementation& m, const std::string& field,
                              const std::string& value) {
  const auto& vals = implementation_values(field);
  size_t i = 0;
  while (i < vals.size() && vals[i] != value) ++i;
  if (i == vals.size()) return false;
  if (field == "loss")
    m.loss = static_cast<LossImpl>(i);
  else if (field == "rms_norm")
    m.rms_norm = static_cast<NormImpl>(i);
  else if (field == "rope")
    m.rope = static_cast<RopeImpl>(i);
  else if (field == "gqa")
    m.gqa = static_cast<GqaImpl>(i);
  else if (field == "attention")
    m.attention = static_cast<AttentionImpl>(i);
  else if (field == "loss_normalization")
    m.loss_normalization = static_cast<LossNormalization>(i);
  else
    return false;
  return true;
}

const char* loss_impl_name(LossImpl v) {
  return value_table().at("loss")[static_cast<size_t>(v)].c_str();
}
const char* norm_impl_name(NormImpl v) {
  return value_table().at("rms_norm")[static_cast<size_t>(v)].c_str();
}
const char* rope_impl_name(RopeImpl v) {
  return value_table().at("rope")[static_cast<size_t>(v)].c_str();
}
const char* gqa_impl_name(GqaImpl v) {
  return value_table().at("gqa")[static_cast<size_t>(v)].c_str();
}
const char* attention_impl_name(AttentionImpl v) {
  return value_table().at("attention")[static_cast<size_t>(v)].c_str();
}
const char* loss_normalization_name(LossNormalization v) {
  return value_table().at("loss_normalization")[static_cast<size_t>(v)].c_str();
}

}  // namespace fullshard
