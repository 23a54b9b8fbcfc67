#include "core/train/apply_fsdp.h"

#include <string>
#include <vector>

namespace fullshard {
namespace {
bool has_child(const Module& m, const std::string& name) {
  for (const auto& ch : m.children)
    if (ch->fqn == name) return true;  // the root's children: fqn is the short name
  return false;
}
}  // namespace

void apply_fsdp(const Scenario& s, Transformer& model, FSDPRuntime& fsdp, bool pp_enabled) {
  FullyShardOptions o;
  o.reshard_after_forward = s.fsdp.reshard_after_forward;
  o.mp_policy = s.fsdp.mixed_precision;
  o.cpu_offload = s.fsdp.cpu_offload;
  o.pin_memory = s.fsdp.pin_memory;
  std::vector<FSDPState*> block_states;
  // Per-unit reshard_after_forward (fsdp.per_unit, NOTE [Per-unit options] in scenario_fsdp.cc).
  auto unit_options = [&](const std::string& unit) {
    FullyShardOptions u = o;
    u.reshard_after_forward = s.fsdp.reshard_for(unit);
    // torchtitan's get_fsdp_reshard_after_forward_policy("default", pp_enabled): not pp_enabled.
    if (pp_enabled && u.reshard_after_forward.kind == ReshardAfterForward::Kind::kDefault)
      u.reshard_after_forward.kind = ReshardAfterForward::Kind::kFalse;
    u.mp_policy = s.fsdp.mixed_precision_for(unit);
    return u;
  };
  if (s.fsdp.units == ShardingUnits::kEmbedBlocksHead) {
    // torchtitan's apply_fsdp_to_decoder: tok_embeddings, fully_shard([norm, output]), each
    // block, the root. Its reshard_after_forward for [norm, output] is False unless the policy
    // is "always": a scenario says so with fsdp.per_unit {"output": ...}. A pipeline stage has
    // the modules of its part only.
    model.set_edge_module_calls(true);
    Module& r = model.root();
    if (s.model.tie_embeddings) {  // fully_shard([tok_embeddings, norm, output]): NOTE [Tied
                                   // embeddings unit]
      fsdp.fully_shard(
          std::vector<Module*>{&r.child("tok_embeddings"), &r.child("norm"), &r.child("output")},
          unit_options("output"));
    } else {
      if (has_child(r, "tok_embeddings"))
        fsdp.fully_shard(r.child("tok_embeddings"), unit_options("tok_embeddings"), false);
      if (has_child(r, "output"))
        fsdp.fully_shard(std::vector<Module*>{&r.child("norm"), &r.child("output")},
                         unit_options("output"));
    }
  }
  if (s.fsdp.units != ShardingUnits::kRoot)
    for (Module* blk : model.blocks())
      block_states.push_back(&fsdp.fully_shard(*blk, unit_options(blk->fqn), false));
  FSDPState& root = fsdp.fully_shard(model.root(), unit_options("root"), true);
  // Explicit prefetching (set_modules_to_forward_prefetch / _backward_prefetch).
  const int nb = static_cast<int>(block_states.size());
  if (s.fsdp.forward_prefetch > 0)
    for (int i = 0; i < nb; ++i)
      for (int k = 1; k <= s.fsdp.forward_prefetch && i + k < nb; ++k)
        block_states[i]->forward_prefetch.push_back(block_states[i + k]);
  if (s.fsdp.backward_prefetch > 1) {
    for (int i = 0; i < nb; ++i) {
      std::vector<FSDPState*> t;
      for (int k = 1; k <= s.fsdp.backward_prefetch && i - k >= 0; ++k)
        t.push_back(block_states[i - k]);
      block_states[i]->backward_prefetch = t;
    }
    std::vector<FSDPState*> t;
    for (int k = 1; k <= s.fsdp.backward_prefetch && nb - k >= 0; ++k)
      t.push_back(block_states[nb - k]);
    root.backward_prefetch = t;
  }
  // FSDPModule's gradient division settings on every unit (NOTE [Global valid tokens] in
  // training_program.cc).
  std::optional<double> divide = s.fsdp.gradient_divide_factor;
  if (!divide && s.model.implementation.loss_normalization == LossNormalization::kGlobalValidTokens)
    divide = 1.0;  // torchtitan's disable_fsdp_gradient_division
  if (divide) fsdp.set_gradient_divide_factor(*divide);
  if (s.fsdp.force_sum_reduction_for_comms) fsdp.set_force_sum_reduction_for_comms(true);
}

}  // namespace fullshard
