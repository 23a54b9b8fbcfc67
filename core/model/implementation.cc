#include "core/model/implementation.h"

#include <map>

namespace fullshard {

// NOTE [Implementation presets]: what each named program does, read from its sources.
// - fullshard: the ops fullshard modelled before model.implementation existed (the default).
// - torchtitan-2024: pytorch/torchtitan@3f20451 (2024-12-26), train.py loss_fn is
//   F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)) outside the model, with
//   `del pred` before backward; torchtitan/models/norms.py RMSNorm is the eager
//   `_norm(x.float()).type_as(x) * weight` (norm_type = "rmsnorm" in train_configs/*.toml);
//   torchtitan/models/llama/model.py apply_rotary_emb is view_as_complex(x.float()) *
//   freqs_cis then type_as, repeat_kv expands k / v to the query heads, and SDPA runs with
//   is_causal=True (flash on A100/H100); compile = false in the shipped configs.
// - torchtitan-2024-04: pytorch/torchtitan@1ea476e9 (2024-04-24), the commit whose
//   docs/performance.md published the A100 rows tools/validate checks: Transformer.forward
//   ends with `output = self.output(h).float()` (torchtitan/models/llama/model.py), train.py
//   runs `pred = model(input_ids); loss = loss_fn(pred, labels); loss.backward()` with
//   loss_fn = F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1)) and no `del pred`,
//   so the fp32 logits stay referenced through backward; complex RoPE and repeat_kv as in
//   torchtitan-2024; RMSNorm is train_configs' norm_type: "fused_rmsnorm" (torchtitan's
//   Triton TritonFusedRMSNorm, one kernel each way, saving x, weight and fp32 rstd as
//   torch._fused_rms_norm does) for llama2_13b / llama3_8b, the eager "rmsnorm" for
//   llama2_70b / llama3_70b (a scenario sets rms_norm = eager for those).
// - torchtitan: pytorch/torchtitan@b5bcd76 (main, 2026-08): ChunkedLossWrapper around
//   CrossEntropyLoss (components/loss.py), RMSNorm = nn.RMSNorm (fused on PyTorch >= 2.8),
//   ComplexRoPE (models/common/rope.py), SDPA with enable_gqa and the backend priority
//   [CUDNN_ATTENTION, FLASH_ATTENTION, MATH] (models/common/attention.py).
// - hf-transformers: LlamaForCausalLM: LlamaRMSNorm is the eager decomposition (fp32
//   variance, hidden_states.to(input_dtype), weight * ...), apply_rotary_pos_emb is
//   q * cos + rotate_half(q) * sin with cos / sin in the model dtype, the sdpa integration
//   passes enable_gqa when torch >= 2.5 and the mask is None (use_gqa_in_sdpa), the loss
//   upcasts the logits (ForCausalLMLoss: logits.float()), and the model's output holds the
//   logits until the training loop drops it (after backward).
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
  static const std::vector<std::string> f = {"loss", "loss_chunks", "keep_logits", "rms_norm",
                                             "rope", "gqa",         "attention",   "compile"};
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

}  // namespace fullshard
