// training.frozen_dtype "nf4" and training.nf4 (docs/scenario-format.md): QLoRA's NF4 base
// weights, parsed and checked (NOTE [What NF4 composes with]).
#include <string>

#include "core/common/error.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/lora_checks.h"
#include "core/scenario/scenario_sections.h"
#include "core/tensor/nf4.h"

// NOTE [What NF4 composes with]: torchtune's QLoRA recipe (lora_finetune_distributed.py with a
// qlora_* model builder) quantises every block's frozen base linear with to_nf4 (FrozenNF4Linear;
// the output projection stays bf16: "quantize_base is not applied to final output_proj", its
// llama3/_component_builders.py at pytorch/torchtune@bd2a0fc) and shards it with
// fully_shard; fullshard builds that program on the paths frozen parameters run on, and
// refuses by name what FSDP2 + torchao do not run or fullshard does not model yet:
// - a GPT-2 model or linear biases (torchtune's QLoRA builders are Llama's, FrozenNF4Linear's
//   bias=False) and a compute dtype other than bf16
//   (the NF4Tensor is bf16 outside; its post-all-gather ignores param_dtype);
// - a weight whose elements do not split into whole blocks x scaler blocks (torchao asserts),
//   or whose rows or quantisation factors do not split evenly over the shard group (torchao's
//   aten.split / new_zeros of an NF4Tensor raise: FSDP2 cannot pad an NF4 shard);
// - HSDP (torchtune's load_from_full_model_state_dict raises on a 2-D mesh), an int
//   reshard_after_forward (FSDP2 raises NotImplementedError for an extension's post-forward
//   shard), CPU offload, ignored parameters, op-level SAC, training.init other than "meta",
//   model.weights and training.checkpoint (NF4 shards are not in a checkpoint's pieces yet).

namespace fullshard::scenario_detail {

namespace jr = json_reader;

void parse_nf4(const nlohmann::json& v, Nf4Config& nf4) {
  const std::string P = "training.nf4";
  jr::require_object(v, P, "{\"block_size\": 64, \"scaler_block_size\": 256}");
  check_fields(v, P);
  if (v.contains("block_size"))
    nf4.block_size = jr::get_int(v.at("block_size"), P + ".block_size", 2, 1 << 20, "64");
  if (nf4.block_size % 2 != 0)
    throw InputError(P + ".block_size", "is " + std::to_string(nf4.block_size) + ", odd",
                     "use an even block size (two 4-bit codes per byte), e.g. 64");
  if (v.contains("scaler_block_size"))
    nf4.scaler_block_size =
        jr::get_int(v.at("scaler_block_size"), P + ".scaler_block_size", 1, 1 << 20, "256");
}

}  // namespace fullshard::scenario_detail

namespace fullshard {

void check_nf4(const Scenario& s) {
  const auto& t = s.training;
  const std::string F = "training.frozen_dtype";
  if (!t.nf4.enabled) return;
  auto refuse = [&](const std::string& with, const std::string& fix) {
    throw InputError(F, "is \"nf4\" with " + with + ", which NF4 base weights do not run with yet",
                     fix + " (docs/qlora.md)");
  };
  if (s.model.arch != ModelArch::kLlama)
    refuse("a GPT-2 model", "use a Llama model, or frozen_dtype \"bf16\"");
  if (s.model.qkv_bias || s.model.linear_bias)  // torchtune's FrozenNF4Linear has no bias
    refuse("linear biases (model.qkv_bias / linear_bias)", "use a model without them");
  auto check_pd = [&](const std::optional<DType>& pd, const std::string& where) {
    const DType d = pd.value_or(t.orig_dtype);
    if (d != DType::kBFloat16)
      refuse(where + " " + std::string(dtype_name(d)) + " (NF4 dequantises to bf16)",
             "set " + where + " to \"bf16\"");
  };
  check_pd(s.fsdp.mixed_precision.param_dtype, "fsdp.mixed_precision.param_dtype");
  for (const auto& [unit, o] : s.fsdp.per_unit_mixed_precision)
    if (o.param_dtype) check_pd(*o.param_dtype, "fsdp.per_unit." + unit + ".param_dtype");
  if (s.fsdp.mesh_size("replicate") > 1) refuse("an HSDP replicate dim", "remove it");
  auto is_int = [](const ReshardAfterForward& r) {
    return r.kind == ReshardAfterForward::Kind::kInt;
  };
  bool pf = is_int(s.fsdp.reshard_after_forward);
  for (const auto& [unit, r] : s.fsdp.per_unit_reshard) pf = pf || is_int(r);
  if (pf) refuse("an int reshard_after_forward", "use reshard_after_forward true or false");
  if (s.fsdp.cpu_offload) refuse("fsdp.cpu_offload", "turn CPU offload off");
  if (!s.fsdp.ignored_params.empty()) refuse("fsdp.ignored_params", "remove them");
  if (t.activation_checkpointing.mode == RecomputeMode::kSelectiveOp)
    refuse("op-level selective activation checkpointing", "use full or selective_layer");
  if (t.init != ModelInit::kMeta) refuse("training.init other than \"meta\"", "remove it");
  if (!s.model_weights.empty()) refuse("model.weights", "remove model.weights");
  if (t.checkpoint.every > 0) refuse("training.checkpoint", "remove training.checkpoint");

  Transformer model(s.model);
  freeze_parameters(model.root(), t.frozen, s.model.lora.enabled(), DType::kBFloat16, t.nf4);
  const int64_t w = s.fsdp.fsdp_shard_size();
  bool any = false;
  std::string bad;
  model.root().for_each_param([&](Param& p) {
    if (!p.nf4() || !bad.empty()) return;
    any = true;
    const Nf4Layout l{numel(p.shape), p.nf4_block_size, p.nf4_scaler_block_size};
    if (!l.valid())
      bad = p.fqn + " has " + std::to_string(l.numel) + " elements, not a multiple of " +
            std::to_string(l.block_size) + " x " + std::to_string(l.scaler_block_size) +
            " (training.nf4's block_size x scaler_block_size)";
    else if (p.shape[0] % w != 0 || l.n_scaler_blocks() % w != 0)
      bad = p.fqn + " " + shape_str(p.shape) + " with " + std::to_string(l.n_scaler_blocks()) +
            " quantisation factors does not split evenly over the " + std::to_string(w) +
            " shard ranks (FSDP2 cannot pad an NF4 shard)";
  });
  if (!any)
    throw InputError(F, "is \"nf4\" but no frozen parameter is a block linear's weight",
                     "freeze linear weights (model.lora freezes them all), or use \"bf16\"");
  if (!bad.empty())
    throw InputError(F, "is \"nf4\" but " + bad,
                     "set training.nf4.block_size / scaler_block_size smaller, or change the "
                     "model's dims or the shard size");
}

}  // namespace fullshard
