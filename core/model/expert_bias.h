#pragma once
// DeepSeek-V3's auxiliary-loss-free load balancing (the expert bias) and group-limited routing,
// as torchtitan runs them: the MoE layer's two buffers, the router's choice scores, and the
// optimizer step pre-hook that moves the bias toward balance.
//
// NOTE [Expert bias]: torchtitan at pytorch/torchtitan@2aac20a (models/moe/moe.py,
// components/optimizer.py). MoE registers fp32 [E] buffers `expert_bias` (persistent) and
// `tokens_per_expert`; FSDP2 leaves buffers whole on every rank. The router picks the top-k
// from scores + expert_bias, with num_expert_groups first masking (-inf) all but each token's
// num_limited_groups best groups (a group scored by its top-2 sum), and gathers the unbiased
// scores as gate values. MoE.forward adds the router's histc into tokens_per_expert (twice when
// checkpointing recomputes the block). An optimizer step pre-hook vstacks every MoE layer's
// counts (// 2 for checkpointed blocks), all-reduces them (SUM) over the dp_cp mesh on the
// default stream, then per layer d = coeff sign(mean - tokens), expert_bias += d - mean(d),
// counts zeroed. Here the choice is one op (kRouterChoice; the group path's transients, and with
// the bias a second [N, E] while the mask writes, are not modelled), the discarded top-k values and choice scores live until the router
// returns, and the stack and the update are one op each. Without bias and groups the router
// keeps the @08dc75a sequence (the top-k values are the gate), so those models are unchanged.
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
