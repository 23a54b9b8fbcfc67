// model.lora, training.frozen and training.frozen_dtype (docs/scenario-format.md): parsing and
// what frozen parameters and LoRA compose with (NOTE [Frozen parameters] in core/model/lora.cc).
#include <set>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/lora_checks.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard::scenario_detail {

namespace jr = json_reader;
using nlohmann::json;

LoraConfig parse_lora(const json& v, const ModelConfig& model) {
  const std::string P = "model.lora";
  const std::string example =
      "{\"rank\": 16, \"alpha\": 32, \"target_modules\": [\"q_proj\", \"v_proj\"]}";
  jr::require_object(v, P, example);
  check_fields(v, P);
  if (model.arch != ModelArch::kLlama)
    throw InputError(P, "is set for a GPT-2 model",
                     "use a Llama model: the target modules are Llama's linears (q_proj ... "
                     "down_proj)");
  for (const char* key : {"rank", "alpha", "target_modules"})
    jr::require_field(v, P, key, "write " + example);
  LoraConfig l;
  const int64_t smallest =
      std::min({model.dim, model.ffn_dim, model.n_kv_heads * model.head_dim()});
  l.rank = jr::get_int(v.at("rank"), P + ".rank", 1, smallest, "16");
  l.alpha = jr::get_number(v.at("alpha"), P + ".alpha", 0, false, kInf, false, "32");
  const json& t = v.at("target_modules");
  const std::string T = P + ".target_modules";
  std::string names;
  for (const std::string& n : lora_peft_names()) names += (names.empty() ? "" : ", ") + n;
  if (!t.is_array() || t.empty())
    throw InputError(T, "is " + jr::describe(t) + ", not a non-empty list",
                     "list PEFT module names, e.g. [\"q_proj\", \"v_proj\"] (of " + names + ")");
  std::set<std::string> seen;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string at = jr::index_path(T, i);
    const std::string name = jr::get_choice(t[i], at, lora_peft_names());
    if (!seen.insert(name).second)
      throw InputError(at, "is \"" + name + "\", given twice", "name each module once");
    l.target_modules.push_back(lora_module_for(name));
  }
  return l;
}

std::vector<std::string> parse_frozen(const json& v) {
  const std::string P = "training.frozen";
  const std::string fix =
      "write a list of fnmatch patterns over parameter names, e.g. "
      "[\"tok_embeddings.weight\", \"layers.*.attention.wq.weight\"]";
  if (!v.is_array()) throw InputError(P, "is " + jr::describe(v) + ", not a list", fix);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = jr::index_path(P, i);
    out.push_back(jr::get_string(v[i], at, "\"layers.*.attention.wq.weight\""));
    if (out.back().empty()) throw InputError(at, "is empty", fix);
  }
  return out;
}

std::optional<DType> parse_frozen_dtype(const json& v) {
  const std::string d = jr::get_choice(v, "training.frozen_dtype", {"fp32", "bf16", "fp16", "nf4"});
  if (d == "nf4") return DType::kBFloat16;  // NF4 dequantises to bf16 (scenario_nf4.cc)
  return d == "fp32" ? DType::kFloat32 : d == "bf16" ? DType::kBFloat16 : DType::kFloat16;
}

// NOTE [What frozen parameters compose with]: frozen parameters and LoRA are built for FSDP and
// HSDP meshes of a dense Llama / GPT-2 trained eagerly; the paths whose ops do not yet skip a
// frozen weight's gradient (tensor parallelism, async TP, pipeline stages, context parallelism,
// experts, float8 linears, the compiled block) are refused by name. A frozen dtype other than
// the original dtype (training.orig_dtype, fp32 unless set) must be the compute dtype
// (fsdp.mixed_precision.param_dtype): FSDP2 would otherwise all-gather it beside parameters of
// another dtype and the linear would mix dtypes. Original parameters in bf16 (NOTE [Original
// dtype] in core/fsdp/fsdp_param_group.cc) are built on the same paths and refused on the others.
}  // namespace fullshard::scenario_detail

namespace fullshard {

namespace {

void check_orig_dtype(const Scenario& s) {
  const auto& t = s.training;
  if (t.orig_dtype == DType::kFloat32) return;
  auto refuse = [&](const std::string& with, const std::string& fix) {
    throw InputError("training.orig_dtype",
                     "is \"" + std::string(dtype_name(t.orig_dtype)) + "\" with " + with +
                         ", which parameters stored in bf16 do not run with yet",
                     fix + ", or set training.orig_dtype to \"fp32\"");
  };
  if (s.fsdp.mesh_size("tp") > 1) refuse("a tp mesh dim", "remove the tp dim");
  if (s.pipeline.enabled()) refuse("a pp mesh dim", "remove the pp dim");
  if (s.context_parallel.enabled()) refuse("a cp mesh dim", "remove the cp dim");
  if (s.model.moe.enabled()) refuse("a mixture-of-experts model", "use a dense model");
  if (s.expert_parallel.degree > 1) refuse("expert_parallel", "remove expert_parallel");
  if (t.float8.recipe != Float8Recipe::kNone) refuse("training.float8", "remove training.float8");
  if (s.model.implementation.compile)
    refuse("model.implementation.compile", "set compile to false");
}

}  // namespace

void check_frozen(const Scenario& s) {
  namespace jr = json_reader;
  check_orig_dtype(s);
  check_ignored_params(s);
  const bool lora = s.model.lora.enabled();
  const auto& t = s.training;
  if (!lora && t.frozen.empty()) {
    if (t.frozen_dtype)
      throw InputError("training.frozen_dtype", "is set but no parameter is frozen",
                       "remove it, or add training.frozen or model.lora");
    return;
  }
  const std::string what = lora ? "model.lora" : "training.frozen";
  auto refuse = [&](const std::string& with, const std::string& fix) {
    throw InputError(what, "is set with " + with + ", which frozen parameters do not run with yet",
                     fix);
  };
  if (s.fsdp.mesh_size("tp") > 1) refuse("a tp mesh dim", "remove the tp dim");
  if (s.pipeline.enabled()) refuse("a pp mesh dim", "remove the pp dim");
  if (s.context_parallel.enabled()) refuse("a cp mesh dim", "remove the cp dim");
  if (s.model.moe.enabled()) refuse("a mixture-of-experts model", "use a dense model");
  if (s.expert_parallel.degree > 1) refuse("expert_parallel", "remove expert_parallel");
  if (t.float8.recipe != Float8Recipe::kNone) refuse("training.float8", "remove training.float8");
  if (s.model.implementation.compile)
    refuse("model.implementation.compile", "set compile to false");
  check_nf4(s);
  const DType fd = frozen_dtype(s);
  if (fd != t.orig_dtype) {
    auto check_pd = [&](const std::optional<DType>& pd, const std::string& where) {
      if (pd != fd)
        throw InputError(
            "training.frozen_dtype",
            "is \"" + std::string(dtype_name(fd)) + "\"" +
                (t.frozen_dtype ? "" : " (model.lora's default)") + " but " + where + " is " +
                (pd ? std::string(dtype_name(*pd))
                    : "unset (training.orig_dtype, " + std::string(dtype_name(t.orig_dtype)) + ")"),
            "set fsdp.mixed_precision.param_dtype to \"" + std::string(dtype_name(fd)) +
                "\", or training.frozen_dtype to \"" + std::string(dtype_name(t.orig_dtype)) +
                "\"");
    };
    check_pd(s.fsdp.mixed_precision.param_dtype, "fsdp.mixed_precision.param_dtype");
    for (const auto& [unit, o] : s.fsdp.per_unit_mixed_precision)
      if (o.param_dtype) check_pd(*o.param_dtype, "fsdp.per_unit." + unit + ".param_dtype");
  }
  // Every pattern names some parameter, and something is left to train.
  Transformer model(s.model);
  std::vector<std::string> fqns;
  model.root().for_each_param([&](Param& p) { fqns.push_back(p.fqn); });
  for (size_t i = 0; i < t.frozen.size(); ++i) {
    bool any = false;
    for (const std::string& f : fqns) any = any || fnmatch_fqn(t.frozen[i], f);
    if (!any)
      throw InputError(
          jr::index_path("training.frozen", i),
          "is \"" + t.frozen[i] + "\", which matches no parameter of model '" + s.model.name + "'",
          "use a parameter name such as \"" + fqns.back() +
              "\" ('*' matches any characters, dots included)");
  }
  const int frozen = freeze_parameters(model.root(), t.frozen, lora, fd, t.nf4);
  if (frozen == static_cast<int>(fqns.size()))
    throw InputError("training.frozen", "freezes every parameter of the model",
                     "leave some parameter trainable, or add model.lora adapters");
}

DType frozen_dtype(const Scenario& s) {
  if (s.training.frozen_dtype) return *s.training.frozen_dtype;
  return s.model.lora.enabled() ? DType::kBFloat16 : s.training.orig_dtype;
}

}  // namespace fullshard
