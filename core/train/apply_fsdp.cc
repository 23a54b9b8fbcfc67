#include "core/train/apply_fsdp.h"

#include <map>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/mesh/expert_mesh.h"
#include "core/model/lora.h"

namespace fullshard {
namespace {
bool has_child(const Module& m, const std::string& name) {
  for (const auto& ch : m.children)
    if (ch->fqn == name) return true;  // the root's children: fqn is the short name
  return false;
}

Module* find_child(Module& m, const std::string& name) {  // null when m has no such child
  const std::string fqn = m.fqn.empty() ? name : m.fqn + "." + name;
  for (auto& ch : m.children)
    if (ch->fqn == fqn) return ch.get();
  return nullptr;
}

// NOTE [MoE prefetch]: with expert parallelism torchtitan sets explicit prefetching, "as D2H
// syncs in EP could interfere with implicit prefetching in FSDP": each block's forward prefetches
// the next block and, when it is a MoE block, its experts; each block's backward prefetches the
// previous block and its experts; tok_embeddings prefetches the first block, [norm, output] the
// last one in backward (when they are units of their own: fsdp.units embed_blocks_head). These
// lists replace fsdp.forward_prefetch / backward_prefetch's.
void set_moe_prefetch(Transformer& model, FSDPRuntime& fsdp, const std::vector<FSDPState*>& blocks,
                      const std::map<const Module*, FSDPState*>& experts) {
  const auto& mods = model.blocks();
  const int nb = static_cast<int>(blocks.size());
  auto with_experts = [&](int i) {
    std::vector<FSDPState*> v = {blocks[static_cast<size_t>(i)]};
    auto it = experts.find(mods[static_cast<size_t>(i)]);
    if (it != experts.end()) v.push_back(it->second);
    return v;
  };
  Module& r = model.root();
  FSDPState* embed =
      find_child(r, "tok_embeddings") ? fsdp.state_of(r.child("tok_embeddings")) : nullptr;
  FSDPState* head = find_child(r, "output") ? fsdp.state_of(r.child("output")) : nullptr;
  if (embed && nb > 0) embed->forward_prefetch = {blocks[0]};
  for (int i = 0; i < nb; ++i) {
    blocks[static_cast<size_t>(i)]->forward_prefetch.clear();
    if (i + 1 < nb)
      blocks[static_cast<size_t>(i)]->forward_prefetch = with_experts(i + 1);
    else if (head)
      blocks[static_cast<size_t>(i)]->forward_prefetch = {head};
  }
  if (head && nb > 0) head->backward_prefetch = std::vector<FSDPState*>{blocks.back()};
  for (int i = nb - 1; i >= 0; --i) {
    if (i > 0)
      blocks[static_cast<size_t>(i)]->backward_prefetch = with_experts(i - 1);
    else if (embed)
      blocks[static_cast<size_t>(i)]->backward_prefetch = std::vector<FSDPState*>{embed};
    else
      blocks[static_cast<size_t>(i)]->backward_prefetch = std::vector<FSDPState*>{};
  }
}
// fsdp.per_unit.<unit>.forward_prefetch / backward_prefetch: a script's
// set_modules_to_forward_prefetch / set_modules_to_backward_prefetch with named units, set last
// so they replace the counts' (and torchtitan's MoE) lists for that unit.
void set_named_prefetch(const Scenario& s, Transformer& model, FSDPRuntime& fsdp,
                        const std::vector<FSDPState*>& blocks, FSDPState& root) {
  if (s.fsdp.per_unit_forward_prefetch.empty() && s.fsdp.per_unit_backward_prefetch.empty()) return;
  std::map<std::string, FSDPState*> by_unit = {{"root", &root}};
  for (size_t i = 0; i < blocks.size(); ++i) by_unit["layers." + std::to_string(i)] = blocks[i];
  Module& r = model.root();
  if (s.fsdp.units == ShardingUnits::kEmbedBlocksHead) {  // resolve_unit's names
    if (find_child(r, "output")) by_unit["output"] = fsdp.state_of(r.child("output"));
    if (find_child(r, "tok_embeddings"))
      by_unit["tok_embeddings"] = fsdp.state_of(r.child("tok_embeddings"));
  }
  auto states = [&](const std::vector<std::string>& units) {
    std::vector<FSDPState*> v;
    for (const std::string& u : units) {
      auto it = by_unit.find(u);
      FULLSHARD_CHECK(it != by_unit.end() && it->second, "no FSDP unit '" + u + "'");
      v.push_back(it->second);
    }
    return v;
  };
  for (const auto& [unit, targets] : s.fsdp.per_unit_forward_prefetch)
    states({unit}).front()->forward_prefetch = states(targets);
  for (const auto& [unit, targets] : s.fsdp.per_unit_backward_prefetch)
    states({unit}).front()->backward_prefetch = states(targets);
}

// fsdp.per_unit.tok_embeddings.unshard_in_backward false: set_unshard_in_backward(False).
void set_unshard_in_backward(const Scenario& s, Transformer& model, FSDPRuntime& fsdp) {
  for (const std::string& unit : s.fsdp.no_unshard_in_backward) {
    FULLSHARD_CHECK(unit == "tok_embeddings" && find_child(model.root(), unit),
                    "unshard_in_backward on unit " + unit);
    FSDPState* st = fsdp.state_of(model.root().child(unit));
    FULLSHARD_CHECK(st && st->group && st->module == &model.root().child(unit),
                    "tok_embeddings is not a unit of its own");
    st->group->set_unshard_in_backward(false);
  }
}
}  // namespace

void apply_fsdp(const Scenario& s, Transformer& model, FSDPRuntime& fsdp, bool pp_enabled,
                DeviceParams* device_params) {
  FullyShardOptions o;
  o.reshard_after_forward = s.fsdp.reshard_after_forward;
  o.mp_policy = s.fsdp.mixed_precision;
  o.cpu_offload = s.fsdp.cpu_offload;
  o.pin_memory = s.fsdp.pin_memory;
  o.device_params = device_params;
  // fsdp.ignored_params: one set passed to every call, as a script passes its ignored_params to
  // each fully_shard (NOTE [Ignored parameters] in core/fsdp/ignored_param.h).
  if (!s.fsdp.ignored_params.empty())
    model.root().for_each_param([&](Param& p) {
      for (const std::string& pat : s.fsdp.ignored_params)
        if (fnmatch_fqn(pat, p.fqn)) o.ignored_params.insert(&p);
    });
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
  // NOTE [Experts' own unit]: with expert parallelism torchtitan's apply_fsdp (llama4
  // parallelize.py at pytorch/torchtitan@36a4b69) fully_shards each MoE block's routed experts
  // over the efsdp mesh first, with Shard(1) when efsdp x ep exceeds the experts and the dense
  // data-parallel size as their gradient divide factor; the router and shared experts go with
  // the block.
  const MeshInfo& mesh = fsdp.mesh();
  std::map<const Module*, FSDPState*> expert_states;
  for (Module* blk : model.blocks()) {
    Module* moe = mesh.efsdp_group ? find_child(*blk, "moe") : nullptr;
    if (!moe) continue;
    FullyShardOptions eo = unit_options(blk->fqn);
    eo.shard_group = mesh.efsdp_group;
    const int ep = s.expert_parallel.degree;
    eo.shard_dim = expert_shard_dim(s.model.moe.num_experts, ep, mesh.efsdp_group->size());
    eo.gradient_divide_factor =
        mesh.shard_group.size() * (mesh.replicate_group ? mesh.replicate_group->size() : 1);
    expert_states[blk] = &fsdp.fully_shard(moe->child("experts"), eo, false);
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
  if (!expert_states.empty() && s.fsdp.units != ShardingUnits::kRoot)
    set_moe_prefetch(model, fsdp, block_states, expert_states);
  set_named_prefetch(s, model, fsdp, block_states, root);
  set_unshard_in_backward(s, model, fsdp);
  // FSDPModule's gradient division settings on every unit (NOTE [Global valid tokens] in
  // training_program.cc).
  std::optional<double> divide = s.fsdp.gradient_divide_factor;
  if (!divide && s.model.implementation.loss_normalization == LossNormalization::kGlobalValidTokens)
    divide = 1.0;  // torchtitan's disable_fsdp_gradient_division
  if (divide) fsdp.set_gradient_divide_factor(*divide);
  if (s.fsdp.force_sum_reduction_for_comms) fsdp.set_force_sum_reduction_for_comms(true);
  // model._set_unshard_async_op(True) (NOTE [Hooks' async unshard] in fsdp_param_group.cc).
  if (s.fsdp.hooks_unshard_async_op) fsdp.set_unshard_async_op(true);
}

FSDPState& fsdp_unit(Transformer& model, FSDPRuntime& fsdp, const std::string& unit) {
  Module* m = nullptr;
  if (unit == "root") {
    m = &model.root();
  } else if (unit.rfind("layers.", 0) == 0) {
    const size_t i = std::stoul(unit.substr(7));
    if (i < model.blocks().size()) m = model.blocks()[i];
  } else {
    m = find_child(model.root(), unit);
  }
  FSDPState* st = m ? fsdp.state_of(*m) : nullptr;
  FULLSHARD_CHECK(st != nullptr, "no FSDP unit '" + unit + "'");
  return *st;
}

}  // namespace fullshard
