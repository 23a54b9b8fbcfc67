#pragma once
// torchtitan's MoE feed-forward (torchtitan/models/moe/moe.py at pytorch/torchtitan@08dc75a) as a
// module tree and its forward over the ops of moe_ops.h, with ep = 1 (no all-to-all yet).
#include "core/model/autograd.h"
#include "core/model/model_config.h"
#include "core/model/moe_aux_loss.h"
#include "core/model/moe_dispatch.h"

namespace fullshard {

// Adds `moe` under a decoder block: router.gate (Linear, [E, D]), experts (GroupedExperts: w1,
// w3 [E, Fe, D], w2 [E, D, Fe]) and, with a shared expert, shared_experts (FeedForward w1 / w2 /
// w3). torchtitan's fqns, so layers.3.moe.experts.w1 names the same tensor. With expert
// parallelism the experts' weights are this rank's E / ep experts (Param::ep_degree, ep_index).
Module* add_moe_module(Module& block, const ModelConfig& c, const ExpertParallel& ep = {});

// MoE.forward on the ffn_norm output x [B, S, D]: the router, the token reorder, the grouped
// experts over torchtitan's padded permutation, the shared expert, the unsort and the
// score-weighted combine (score_before_experts false), as NOTE [MoE op sequence] in
// moe_layer.cc lists. The routing assumption decides the grouped GEMMs' FLOPs (NOTE [MoE routing
// assumption] in moe_routing.h).
// With ep > 1 the experts' call dispatches and combines over ep (NOTE [Expert-parallel
// dispatch] in moe_layer.cc); `kept_indices` is the experts' ExpertParallel.permuted_indices,
// an attribute that lives from one forward of the layer to the next.
// `aux`: the auxiliary load-balancing loss's state (NOTE [Auxiliary load-balancing loss] in
// moe_aux_loss.h), with load_balance "aux_loss".
Value moe_forward(ExecContext& c, Module& moe, Value x, const ModelConfig& cfg,
                  const ExpertParallel& ep = {}, Tensor* kept_indices = nullptr,
                  MoeAuxLoss* aux = nullptr);

}  // namespace fullshard
