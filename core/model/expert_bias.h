#pragma once
// DeepSeek-V3's auxiliary-loss-free load balancing (the expert bias) and group-limited routing,
// as torchtitan runs them: the MoE layer's two buffers, the router's choice scores, and the
// optimizer step pre-hook that moves the bias toward balance.
//
// NOTE [Expert bias]: read at pytorch/torchtitan@2aac20a (the commit that added node-limited
// routing): torchtitan/models/moe/moe.py and torchtitan/components/optimizer.py.
//   MoE.__init__ registers `expert_bias` (persistent) and `tokens_per_expert` (not persistent),
//     fp32 [E] zeros; buffers are not parameters, so FSDP2 leaves them whole on every rank.
//   TokenChoiceTopKRouter.forward: scores_for_choice = scores + expert_bias; with
//     num_expert_groups, _get_node_limited_routing_scores views it [N, G, E/G], scores each
//     group by the sum of its top-2, keeps the num_limited_groups best and fills the rest with
//     -inf; topk(scores_for_choice, K) picks the experts and top_scores = scores.gather(1,
//     indices): the bias steers the choice only, the gate values are the unbiased scores.
//   MoE.forward: tokens_per_expert.add_(histc) under no_grad, again when activation
//     checkpointing recomputes the block.
//   build_optimizers_with_moe_load_balancing: a step pre-hook vstacks every MoE layer's
//     tokens_per_expert (// 2 where the block is checkpointed), all-reduces the [L, E] stack
//     (SUM) over the dp_cp mesh on the default stream, then per layer d = coeff * sign(mean -
//     tokens), expert_bias += d - mean(d), tokens_per_expert.zero_().
// Here the choice is one op (kRouterChoice: the add, the group scores and the mask; the group
// path's [N, G, 2], [N, G], [N, L] and bool [N, G] transients are not modelled), the discarded
// top-k values and the choice scores live until the router returns, the stack and the update
// are one op each (the per-layer [E] temporaries and the // 2 copies are not modelled). Without
// bias and groups the router keeps the @08dc75a sequence (topk values as the gate).
#include <vector>

#include "core/mesh/device_mesh.h"
#include "core/model/moe_config.h"
#include "core/model/module.h"

namespace fullshard {

// MoE.__init__'s buffers on the `moe` module (expert_bias, tokens_per_expert: fp32 [E]), with
// load_balance "expert_bias" only.
void add_expert_bias_buffers(Module& moe, const MoeConfig& m);

// Allocates and zeroes every buffer in the tree on the device, whole on this rank
// (model.to_empty + init_weights' buffer init), counted with the parameters FSDP keeps whole.
void allocate_buffers(Backend& b, Module& root);

// One MoE layer's buffers for the update, and whether its block's forward runs twice per step
// (activation checkpointing recomputes it, so its counts are doubled).
struct ExpertBiasLayer {
  Module* moe = nullptr;
  bool recomputed = false;
};

// The optimizer step pre-hook (NOTE [Expert bias]): stack, all-reduce over `dp` (the
// data-parallel ranks; none when it has one rank), update every layer's bias, zero its counts.
void update_expert_bias(Backend& b, const std::vector<ExpertBiasLayer>& layers, double coeff,
                        const ProcessGroup& dp);

}  // namespace fullshard
