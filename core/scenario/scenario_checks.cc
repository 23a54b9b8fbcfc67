// The checks parse_scenario applies across sections (a unit layout and the loss, async TP's
// requirements, the dtype flow between FSDP units), once every section is parsed.
#include <algorithm>
#include <set>
#include <string>

#include "core/common/error.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard {

// NOTE [Dtype flow between units]: each unit computes in its param_dtype (training.orig_dtype
// when unset) and F.linear / the fused norms refuse mixed dtypes, so the activations entering a
// unit must be in its compute dtype: the previous unit's compute dtype, or its output_dtype
// cast, or this unit's own input cast (cast_forward_inputs with a param_dtype). The root's final
// norm and output run after the last block with no cast of their own (the root's pre-forward cast
// ran on the token ids). With one policy for every unit this always holds unless output_dtype
// differs from param_dtype; per-unit policies (fsdp.per_unit.<unit>.mixed_precision) can break it,
// and such a program is refused here, naming the unit. (PyTorch's eager ops would promote some
// mixed pairs, e.g. an eager RMSNorm; fullshard refuses them all.)
void check_dtype_flow(const Scenario& s) {
  const FsdpOptions& f = s.fsdp;
  if (f.units == ShardingUnits::kRoot) return;
  auto compute = [&](const std::string& u) {
    return f.mixed_precision_for(u).param_dtype.value_or(s.training.orig_dtype);
  };
  auto path_of = [&](const std::string& u) {
    return f.per_unit_mixed_precision.count(u) ? "fsdp.per_unit." + u + ".mixed_precision"
                                               : std::string("fsdp.mixed_precision");
  };
  auto name = [](DType d) { return std::string(dtype_name(d)); };
  const bool edges = f.units == ShardingUnits::kEmbedBlocksHead;
  // A tied Llama's embedding is in the head's unit (NOTE [Tied embeddings unit]), stored as
  // "output".
  const bool tied = s.model.arch == ModelArch::kLlama && s.model.tie_embeddings;
  std::string from = edges ? (tied ? "output" : "tok_embeddings") : "root";
  DType h = compute(from);
  if (edges)
    if (auto o = f.mixed_precision_for(from).output_dtype) h = *o;
  auto enter = [&](const std::string& u, bool casts) {
    const MixedPrecisionPolicy mp = f.mixed_precision_for(u);
    if (casts && mp.cast_forward_inputs && mp.param_dtype) h = *mp.param_dtype;
    if (h != compute(u))
      throw InputError(
          path_of(u),
          "makes unit '" + u + "' compute in " + name(compute(u)) + " on " + name(h) +
              " activations from '" + from + "' (F.linear refuses mixed dtypes)",
          casts ? "set its cast_forward_inputs true (with a param_dtype), or the previous unit's "
                  "output_dtype to \"" +
                      name(compute(u)) + "\""
                : "set the last block's output_dtype to \"" + name(compute(u)) +
                      "\" (the root's norm and output take the last block's output as it is)");
    h = compute(u);
    if (auto o = mp.output_dtype) h = *o;
    from = u;
  };
  // Blocks without a per-unit policy all follow fsdp.mixed_precision: after two of them the
  // dtype entering the next repeats, so only blocks near an override (and the ends) are walked,
  // whatever the depth (model.n_layers is bounded later, by the simulator).
  const int64_t n = s.model.n_layers;
  std::set<int64_t> walk;
  for (int64_t i = 0; i < std::min<int64_t>(n, 3); ++i) walk.insert(i);
  if (n > 0) walk.insert(n - 1);
  for (const auto& [unit, o] : f.per_unit_mixed_precision)
    if (unit.rfind("layers.", 0) == 0) {
      const int64_t k = std::stoll(unit.substr(7));  // stored resolved: 0 <= k < n
      for (int64_t i = k; i < std::min(n, k + 3); ++i) walk.insert(i);
    }
  for (int64_t i : walk) {
    if (i > 0) from = "layers." + std::to_string(i - 1);
    enter("layers." + std::to_string(i), true);
  }
  enter(edges ? "output" : "root", edges);
}

namespace scenario_detail {

// NOTE [What async TP needs]: torchtitan's enable_async_tp on the program PyTorch can run:
// torch.compile (the micro-pipeline pass is an inductor pass; torchtitan refuses async TP
// without compile); symmetric memory over the tp group, so GPUs of one NVLink domain (the tp
// group inside a node: the tp dim is the mesh's innermost, so gpus_per_node must be a multiple
// of tp); products without a bias (the pass fuses mm, not addmm), so Llama without qkv_bias;
// and no op-level selective activation checkpointing (its save list names aten.mm and the plain
// collectives the pass replaces).
void check_async_tp(const Scenario& s) {
  if (!s.tensor_parallel.async) return;
  const std::string F = "tensor_parallel.async";
  const int tp = s.fsdp.mesh_size("tp");
  if (tp <= 1)
    throw InputError(F, "is true with no tp dim (tp 1)",
                     "add a \"tp\" dim of 2 or more to fsdp.mesh, or write false");
  if (s.model.arch != ModelArch::kLlama || s.model.qkv_bias)
    throw InputError(F, "is true for a model with biased tp linears (GPT-2 or qkv_bias)",
                     "write false: the micro-pipeline pass fuses only bias-free products");
  if (s.hardware.device.compute_capability == 0)
    throw InputError(
        F, "is true on the CPU profile '" + s.hardware.device.name + "'",
        "use a GPU profile (symmetric memory needs GPUs in one NVLink domain), or write false");
  if (s.hardware.gpus_per_node % tp != 0)
    throw InputError(
        F,
        "is true with tp " + std::to_string(tp) + " over nodes of " +
            std::to_string(s.hardware.gpus_per_node) + " GPUs",
        "keep the tp group inside a node (tp dividing hardware.gpus_per_node), or write false");
  if (!s.model.implementation.compile)
    throw InputError(F, "is true without model.implementation compile",
                     "set model.implementation {\"compile\": true}: PyTorch fuses the collectives "
                     "in torch.compile's "
                     "micro-pipeline pass (torchtitan refuses async TP without compile)");
  if (s.training.activation_checkpointing.mode == RecomputeMode::kSelectiveOp)
    throw InputError(F, "is true with activation_checkpointing selective op",
                     "use activation_checkpointing none, full or a layer interval, or write false");
}

// NOTE [Tied embeddings unit]: torchtitan's apply_fsdp_to_decoder (torchtitan/distributed/fsdp.py
// at pytorch/torchtitan@b5bcd76) shards a model with enable_weight_tying as
// fully_shard([tok_embeddings, norm, lm_head], reshard_after_forward=(policy == "always")), then
// each block and the root ("to avoid duplicate all-gathers"); untied, tok_embeddings and [norm,
// lm_head] are two units. fsdp.units "embed_blocks_head" builds the same for a tied Llama: the one
// parameter is all-gathered once per forward and stays unsharded from the embedding's call to the
// output's (the group's post-forward runs when its last module returns); its gradient, the sum of
// both uses, is reduce-scattered once, from the root's final callback (the first module takes token
// ids, so no post-backward hook is registered). Its reshard_after_forward follows
// fsdp.reshard_after_forward (torchtitan's False: fsdp.per_unit {"output":
// {"reshard_after_forward": false}}). ChunkedLossWrapper's FSDP calls act on the whole group (NOTE
// [Chunked loss]). GPT-2 has no lm_head module here and no torchtitan layout.
void check_units_and_loss(const Scenario& s) {
  const ModelConfig& m = s.model;
  if (s.fsdp.units == ShardingUnits::kEmbedBlocksHead && m.arch != ModelArch::kLlama)
    throw InputError(
        "fsdp.units",
        "is \"embed_blocks_head\" for a GPT-2 model, which has no torchtitan unit layout "
        "(its lm_head is the embedding's weight, not a module of its own here)",
        "use \"blocks\" or \"root\"");
  if (m.implementation.loss != LossImpl::kChunked) return;
  const std::string L = "model.implementation.loss";
  // The output's group reduces twice per backward (the output's gradient in the loss chunks'
  // backward, then the norm's in the decoder's): FSDP2's partial sum would add two different
  // sets of parameters (NOTE [Partial reduce without all-reduce], core/fsdp/collectives.h).
  if (s.training.accumulation_sync == AccumulationSync::kReduceScatter &&
      s.training.grad_accum_steps > 1)
    throw InputError("training.grad_sync_during_accumulation",
                     "is \"reduce_scatter\" with the chunked loss, whose output group reduces "
                     "twice per backward with different parameters: FSDP2's partial sums "
                     "(set_requires_all_reduce(False)) would differ in size",
                     "use \"none\" or \"all\", or another model.implementation.loss");
  if (m.arch != ModelArch::kLlama)
    throw InputError(
        L,
        "is \"chunked\" for a GPT-2 model (torchtitan's ChunkedLossWrapper calls a Llama's lm_head "
        "module; GPT-2's lm_head is the embedding's weight, not a module of its own here)",
        "use \"fp32_logits\"");
  // NOTE [Chunked loss under tp]: torchtitan's decoder sharding (models/common/
  // decoder_sharding.py at pytorch/torchtitan@b5bcd76, pre_lm_head_norm_config) gathers the
  // root norm's sequence-parallel output to Replicate, so each chunk enters lm_head replicated;
  // lm_head's output stays vocab-sharded (out_dst S(-1)) into loss parallel's cross-entropy. A
  // chunked loss without loss parallel is a program torchtitan does not write.
  const int tp = s.fsdp.mesh_size("tp");
  if (tp > 1 && !s.tensor_parallel.loss_parallel)
    throw InputError(L,
                     "is \"chunked\" with tp " + std::to_string(tp) +
                         " and tensor_parallel.loss_parallel false "
                         "(torchtitan's chunked loss keeps each chunk's logits vocab-sharded into "
                         "loss parallel)",
                     "set tensor_parallel.loss_parallel true, or use \"fp32_logits\"");
  // The output projection is called after the root's post-forward: owned by the root unit, it
  // must still be unsharded then (a resharded root leaves lm_head.weight a sharded DTensor,
  // which PyTorch refuses to multiply with the plain hidden states).
  if (s.fsdp.units != ShardingUnits::kEmbedBlocksHead) {
    const ReshardAfterForward r = s.fsdp.reshard_for("root");
    const bool reshards = r.kind == ReshardAfterForward::Kind::kTrue ||
                          (r.kind == ReshardAfterForward::Kind::kInt && r.n > 1);
    if (reshards)
      throw InputError(
          L,
          std::string("is \"chunked\" with fsdp.units \"") + sharding_units_name(s.fsdp.units) +
              "\" and a root that reshards after forward: the chunks call the output projection "
              "after the root's forward, when its weight is sharded again",
          "keep the root unsharded (fsdp.per_unit {\"root\": {\"reshard_after_forward\": false}}), "
          "or "
          "use fsdp.units \"embed_blocks_head\" (the output in a unit of its own, as torchtitan)");
  }
  if (m.implementation.keep_logits)
    throw InputError(
        "model.implementation.keep_logits",
        "is true with loss \"chunked\" (the chunked loss never materialises the whole logits)",
        "set keep_logits false");
  const int n = m.implementation.loss_chunks;
  const int cp = s.fsdp.mesh_size("cp");  // each rank holds seq_len / cp tokens of a sequence
  for (int r = 0; r < s.world_size(); ++r) {
    const int64_t tokens = s.training.batch_for(r) * s.training.seq_len / cp;
    if (tokens % n != 0)
      throw InputError(
          "model.implementation.loss_chunks",
          "is " + std::to_string(n) + ", which does not divide rank " + std::to_string(r) + "'s " +
              std::to_string(tokens) + " tokens per micro-batch (batch x seq_len" +
              (cp > 1 ? " / cp" : "") + ")",
          "choose a divisor of " + std::to_string(tokens) + " (torchtitan's default is 8)");
  }
}

void check_model_init(const Scenario& s) {
  if (s.training.init == ModelInit::kMeta) return;
  const std::string mode =
      s.training.init == ModelInit::kDevice ? "\"device\"" : "\"broadcast_from_rank0\"";
  auto refuse = [&](const std::string& with, const std::string& fix) {
    throw InputError("training.init", "is " + mode + " with " + with,
                     fix + ", or use \"meta\" (torchtitan's meta-device init)");
  };
  if (s.fsdp.mesh_size("tp") > 1) refuse("a tp mesh dim", "remove the tp dim");
  if (s.pipeline.enabled()) refuse("a pp mesh dim", "remove the pp dim");
  if (s.model.moe.enabled()) refuse("a mixture-of-experts model", "use a dense model");
  if (s.fsdp.cpu_offload) refuse("fsdp.cpu_offload", "turn cpu_offload off");
  if (!s.model_weights.empty()) refuse("model.weights (a load of its own)", "remove model.weights");
}

}  // namespace scenario_detail
}  // namespace fullshard
