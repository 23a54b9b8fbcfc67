// fsdp.ignored_params (docs/scenario-format.md): parsing, and what parameters FSDP ignores run
// with (NOTE [Ignored parameters] in core/fsdp/ignored_param.h).
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/lora_checks.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard {

// NOTE [What ignored parameters compose with]: FSDP2 never reduces an ignored parameter's
// gradient (FSDPParamGroup holds only managed parameters), so a trainable one would drift apart
// on the ranks unless the script all-reduces its .grad itself before optimizer.step(); that
// user-side all-reduce is not modelled, so every ignored parameter must also be frozen
// (training.frozen, or a base parameter under model.lora): the common use, a frozen embedding
// or head kept whole on every rank. FSDP2 does not cast an ignored parameter either: the
// unit's state still casts the module's floating inputs to param_dtype (cast_forward_inputs),
// and the parameter enters F.linear / F.embedding / the norms in its own dtype, where F.linear
// raises on mixed dtypes and the embedding hands its own dtype to the next module. fullshard
// refuses that program, naming the parameter: its dtype (training.frozen_dtype) must be the
// compute dtype of the unit whose call ignores it. At least one parameter stays managed (FSDP
// with nothing to shard is no FSDP run). Built for the paths frozen parameters run on (FSDP /
// HSDP meshes of dense eager models); checkpoints, whose pieces are FSDP shards, are refused.

namespace {

// The unit (fsdp.per_unit key) whose fully_shard call reaches parameter `fqn` (apply_fsdp).
std::string unit_of(const Scenario& s, const std::string& fqn) {
  if (s.fsdp.units == ShardingUnits::kRoot) return "root";
  if (fqn.rfind("layers.", 0) == 0) return fqn.substr(0, fqn.find('.', 7));
  if (s.fsdp.units != ShardingUnits::kEmbedBlocksHead) return "root";
  const bool tied = s.model.arch == ModelArch::kLlama && s.model.tie_embeddings;
  if (fqn.rfind("tok_embeddings.", 0) == 0) return tied ? "output" : "tok_embeddings";
  if (fqn.rfind("norm.", 0) == 0 || fqn.rfind("output.", 0) == 0) return "output";
  return "root";
}

}  // namespace

void check_ignored_params(const Scenario& s) {
  namespace jr = json_reader;
  const auto& patterns = s.fsdp.ignored_params;
  if (patterns.empty()) return;
  const std::string F = "fsdp.ignored_params";
  auto refuse = [&](const std::string& with, const std::string& fix) {
    throw InputError(F, "is set with " + with + ", which ignored parameters do not run with yet",
                     fix + " (docs/fsdp2-correspondence.md)");
  };
  if (s.fsdp.mesh_size("tp") > 1) refuse("a tp mesh dim", "remove the tp dim");
  if (s.pipeline.enabled()) refuse("a pp mesh dim", "remove the pp dim");
  if (s.context_parallel.enabled()) refuse("a cp mesh dim", "remove the cp dim");
  if (s.model.moe.enabled()) refuse("a mixture-of-experts model", "use a dense model");
  if (s.expert_parallel.degree > 1) refuse("expert_parallel", "remove expert_parallel");
  if (s.training.float8.recipe != Float8Recipe::kNone)
    refuse("training.float8", "remove training.float8");
  if (s.model.implementation.compile)
    refuse("model.implementation.compile", "set compile to false");
  if (s.training.checkpoint.every > 0)
    refuse("training.checkpoint (its pieces are FSDP shards)", "remove training.checkpoint");
  if (!s.model_weights.empty())
    refuse("model.weights (loaded into FSDP shards)", "remove model.weights");

  Transformer model(s.model);
  std::vector<Param*> params;
  model.root().for_each_param([&](Param& p) { params.push_back(&p); });
  std::vector<Param*> ignored;
  for (size_t i = 0; i < patterns.size(); ++i) {
    bool any = false;
    for (Param* p : params) {
      if (!fnmatch_fqn(patterns[i], p->fqn)) continue;
      any = true;
      bool seen = false;
      for (Param* q : ignored) seen = seen || q == p;
      if (!seen) ignored.push_back(p);
    }
    if (!any)
      throw InputError(
          jr::index_path(F, i),
          "is \"" + patterns[i] + "\", which matches no parameter of model '" + s.model.name + "'",
          "use a parameter name such as \"" + params.back()->fqn +
              "\" ('*' matches any characters, dots included)");
  }
  if (ignored.size() == params.size())
    throw InputError(F, "ignores every parameter of the model, leaving FSDP nothing to shard",
                     "leave some parameter to FSDP, or remove fsdp.ignored_params");
  // requires_grad as the training program sets it (training.frozen, model.lora's base).
  const bool lora = s.model.lora.enabled();
  freeze_parameters(model.root(), s.training.frozen, lora, frozen_dtype(s));
  for (size_t i = 0; i < patterns.size(); ++i)
    for (Param* p : ignored) {
      if (!fnmatch_fqn(patterns[i], p->fqn)) continue;
      if (p->requires_grad)
        throw InputError(jr::index_path(F, i),
                         "is \"" + patterns[i] + "\", which matches '" + p->fqn +
                             "', a trainable parameter: FSDP2 leaves its gradient unreduced and "
                             "the all-reduce a script would add is not modelled",
                         "freeze it too (training.frozen), or leave it to FSDP");
      const std::string unit = unit_of(s, p->fqn);
      const DType compute =
          s.fsdp.mixed_precision_for(unit).param_dtype.value_or(s.training.orig_dtype);
      if (p->dtype != compute)
        throw InputError(
            jr::index_path(F, i),
            "is \"" + patterns[i] + "\", which matches '" + p->fqn + "', kept in " +
                std::string(dtype_name(p->dtype)) + " (frozen parameters' dtype) while unit '" +
                unit + "' computes in " + std::string(dtype_name(compute)) +
                ": FSDP2 does not cast an ignored parameter and F.linear refuses mixed dtypes",
            "set training.frozen_dtype to \"" + std::string(dtype_name(compute)) +
                "\", or leave it to FSDP");
    }
  for (const std::string& unit : s.fsdp.no_unshard_in_backward) {
    bool managed = false;
    for (Param* p : params) {
      bool is_ignored = false;
      for (Param* q : ignored) is_ignored = is_ignored || q == p;
      managed = managed || (!is_ignored && unit_of(s, p->fqn) == unit);
    }
    if (!managed)
      throw InputError("fsdp.per_unit." + unit + ".unshard_in_backward",
                       "is false but fsdp.ignored_params ignores every parameter of unit '" + unit +
                           "', which then has no parameter group to unshard",
                       "remove it, or leave the unit's parameters to FSDP");
  }
}

namespace scenario_detail {

std::vector<std::string> parse_ignored_params(const nlohmann::json& v) {
  namespace jr = json_reader;
  const std::string P = "fsdp.ignored_params";
  const std::string fix =
      "write a list of fnmatch patterns over parameter names, e.g. [\"tok_embeddings.weight\"]";
  if (!v.is_array()) throw InputError(P, "is " + jr::describe(v) + ", not a list", fix);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = jr::index_path(P, i);
    out.push_back(jr::get_string(v[i], at, "\"tok_embeddings.weight\""));
    if (out.back().empty()) throw InputError(at, "is empty", fix);
  }
  return out;
}

}  // namespace scenario_detail
}  // namespace fullshard
