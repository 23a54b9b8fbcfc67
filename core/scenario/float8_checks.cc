#include "core/scenario/float8_checks.h"

#include <string>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/model/transformer.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard {

namespace jr = json_reader;

Float8Training parse_float8(const nlohmann::json& v) {
  const std::string P = "training.float8";
  jr::require_object(v, P, "{\"recipe\": \"tensorwise\"}");
  scenario_detail::check_fields(v, P);
  Float8Training f;
  f.recipe = Float8Recipe::kTensorwise;  // Float8LinearConfig()'s default
  if (v.contains("recipe"))
    f.recipe = *float8_recipe_from_name(
        jr::get_choice(v.at("recipe"), P + ".recipe", float8_recipe_names()));
  if (v.contains("enable_fsdp_float8_all_gather"))
    f.enable_fsdp_float8_all_gather =
        jr::get_bool(v.at("enable_fsdp_float8_all_gather"), P + ".enable_fsdp_float8_all_gather");
  if (v.contains("precompute_float8_dynamic_scale_for_fsdp"))
    f.precompute_float8_dynamic_scale_for_fsdp =
        jr::get_bool(v.at("precompute_float8_dynamic_scale_for_fsdp"),
                     P + ".precompute_float8_dynamic_scale_for_fsdp");
  if (v.contains("filter_fqns")) {
    const std::string F = P + ".filter_fqns";
    const nlohmann::json& a = v.at("filter_fqns");
    if (!a.is_array())
      throw InputError(F, "is " + jr::describe(a) + ", not an array",
                       "write a list such as [\"output\"]");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string s = jr::get_string(a[i], jr::index_path(F, i), "\"output\"");
      if (s.empty())
        throw InputError(
            jr::index_path(F, i), "is empty",
            "give a part of a module fqn such as \"output\" (\"\" matches every linear)");
      if (s == "auto_filter_small_kn")
        f.auto_filter_small_kn = true;
      else
        f.filter_fqns.push_back(s);
    }
  }
  return f;
}

// NOTE [What float8 composes with]: what torchao and torchtitan refuse is refused here with
// their reason (torchao/float8/config.py and fsdp_utils.py at pytorch/ao@36027d8, torchtitan's
// Float8LinearConverter at pytorch/torchtitan@6348d93^, torch 2.11's _fsdp_param.py); what they
// run and fullshard does not model yet (float8 with tensor parallelism, biases, op-level SAC,
// CPU offload of float8 weights) is refused as not built, naming the field.
void check_float8(const Scenario& s) {
  const Float8Training& f = s.training.float8;
  if (!f.enabled()) return;
  const std::string P = "training.float8";
  const HardwareProfile& hw = s.hardware.device;
  // A CPU profile (compute_capability 0) runs float8 as the CPU backend emulates it: fp32
  // matmuls of the dequantised operands (NOTE [Float8 on the CPU]), priced at the fp32 rate.
  if (hw.peak_flops_fp8 <= 0 && hw.compute_capability != 0)
    throw InputError(P,
                     "is set but hardware profile '" + hw.name +
                         "' has no float8 tensor cores (no peak_flops_fp8: torchtitan needs sm_89 "
                         "or later)",
                     "use an H100 / H200 class profile, or remove training.float8");
  if (f.enable_fsdp_float8_all_gather && f.recipe != Float8Recipe::kTensorwise)
    throw InputError(P + ".enable_fsdp_float8_all_gather",
                     std::string("is true with recipe \"") + float8_recipe_name(f.recipe) +
                         "\" (torchao: float8 all-gather only supports tensorwise scaling)",
                     "use recipe \"tensorwise\" or write false");
  if (f.precompute_float8_dynamic_scale_for_fsdp && !f.enable_fsdp_float8_all_gather)
    throw InputError(P + ".precompute_float8_dynamic_scale_for_fsdp",
                     "is true without enable_fsdp_float8_all_gather (torchtitan ignores it then)",
                     "set enable_fsdp_float8_all_gather true, or write false");
  if (f.auto_filter_small_kn && f.recipe == Float8Recipe::kRowwiseWithGwHp)
    throw InputError(P + ".filter_fqns",
                     "has \"auto_filter_small_kn\" with recipe \"rowwise_with_gw_hp\" (torchao's "
                     "_auto_filter_for_recipe raises NotImplementedError for it)",
                     "remove \"auto_filter_small_kn\" or use recipe \"tensorwise\" / \"rowwise\"");
  if (s.fsdp.mesh_size("tp") > 1)
    throw InputError(P,
                     "is set with tp " + std::to_string(s.fsdp.mesh_size("tp")) +
                         " (torchao's float8 tensor-parallel styles), which is not built yet",
                     "use a mesh without a tp dim, or remove training.float8 (docs/float8.md)");
  if (s.model.arch != ModelArch::kLlama || s.model.qkv_bias || s.model.linear_bias)
    throw InputError(P, "is set for model '" + s.model.name + "', whose linears have biases",
                     "float8 linears with a bias are not built yet: use a Llama model without "
                     "qkv_bias (docs/float8.md)");
  if (s.training.activation_checkpointing.mode == RecomputeMode::kSelectiveOp)
    throw InputError("training.activation_checkpointing",
                     "is \"selective_op\" with training.float8, which is not built yet",
                     "use \"full\", \"selective_layer\" or \"none\" (docs/float8.md)");
  if (!f.enable_fsdp_float8_all_gather) return;
  if (s.fsdp.fsdp_shard_size() < 2)
    throw InputError(P + ".enable_fsdp_float8_all_gather",
                     "is true without a shard dim of 2 or more (torchtitan turns it off then)",
                     "write false, or shard over 2 or more ranks");
  if (s.fsdp.cpu_offload)
    throw InputError(P + ".enable_fsdp_float8_all_gather",
                     "is true with fsdp.cpu_offload, which is not built yet",
                     "write false, or turn CPU offload off");
  auto post_forward = [](const ReshardAfterForward& r) {
    return r.kind == ReshardAfterForward::Kind::kInt;
  };
  bool pf = post_forward(s.fsdp.reshard_after_forward);
  for (const auto& [unit, r] : s.fsdp.per_unit_reshard) pf = pf || post_forward(r);
  if (pf)
    throw InputError(P + ".enable_fsdp_float8_all_gather",
                     "is true with an int reshard_after_forward (FSDP2 raises "
                     "NotImplementedError all-gathering an extension's post-forward shard)",
                     "use reshard_after_forward true or false, or write false");
  // fsdp_pre_all_gather returns the unpadded shard: FSDP2 asserts it has the padded size.
  const int shard = s.fsdp.fsdp_shard_size();
  Transformer t(s.model);
  std::string uneven;
  t.root().for_each_module([&](Module& m) {
    if (m.kind != "Linear" || !uneven.empty()) return;
    for (Param& p : m.params)
      if (p.fqn == m.fqn + ".weight" && p.shape.size() == 2 &&
          float8_converts(f, m.fqn, p.shape[0], p.shape[1]) && p.shape[0] % shard != 0)
        uneven = m.fqn + " (" + std::to_string(p.shape[0]) + " rows)";
  });
  if (!uneven.empty())
    throw InputError(P + ".enable_fsdp_float8_all_gather",
                     "is true but " + uneven + " does not shard evenly over " +
                         std::to_string(shard) + " ranks (FSDP2 asserts the padded size)",
                     "add it to filter_fqns, or write false");
}

}  // namespace fullshard
