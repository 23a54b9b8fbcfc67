#pragma once
// The auxiliary load-balancing loss of Hugging Face's Mixtral and Qwen MoE models
// (router_aux_loss_coef with output_router_logits; scenario model.moe.load_balance "aux_loss").
//
// NOTE [Auxiliary load-balancing loss]: transformers' load_balancing_loss_func (models/mixtral/
// modeling_mixtral.py, v5.24.0; the same in qwen2_moe / qwen3_moe), which their ForCausalLM adds
// to the loss as coeff * aux: over the T = L N router rows of one forward (L MoE layers of N
// tokens), aux = E sum_e f_e P_e, f_e the share of the T top-k slots routed to expert e (no
// gradient) and P_e the mean softmax probability of e. So d loss / d p_l[t, e] = coeff E f_e / T
// for every layer and token: one constant per expert, known once the whole forward has routed.
// Here two fp32 [E] buffers on the root (the routed counts C and the probability sums S) are
// zeroed before a forward; each MoE layer adds its histc and its softmax's column sums
// (kAddSumRows); after the loss, kMoeAuxLoss adds coeff E sum_e C_e S_e / T^2 to it; and an
// identity node on each layer's softmax output adds seed coeff E C_e / T^2 to that output's
// gradient (kMoeAuxLossBackward; seed: the loss's gradient seed), C as copied at the loss, since
// an activation-checkpointed block's recompute routes again and adds to C. Each rank's loss is
// over its own tokens, as under DDP / FSDP. HF recomputes the softmax of the [T, E] concatenated
// logits for the loss and keeps it for backward; fullshard reuses each router's, and that memory
// is not modelled. Pipeline stages (layers on other ranks), group-limited routing and sigmoid
// scores are refused (core/scenario/moe_checks.cc).
#include <cstdint>

#include "core/model/module.h"
#include "core/model/moe_config.h"
#include "core/model/ops.h"

namespace fullshard {

struct ModelConfig;

// The loss's state for one forward: the root's buffers and the factors.
struct MoeAuxLoss {
  Tensor counts, probs;     // fp32 [E]: C (top-k slots per expert), S (softmax sums)
  Tensor counts_at_loss;    // fp32 [E]: C as the loss saw it (what backward reads)
  int64_t layers = 0;       // L, the model's MoE layers
  int64_t tokens = 0;       // N, each layer's router rows (set by the layers)
  double coeff = 0;         // router_aux_loss_coef
  double grad_seed = 1.0;   // the loss's gradient seed (1 / grad_accum_steps, ...)
  bool enabled() const { return static_cast<bool>(counts); }
};

// The root's buffers moe_aux_counts / moe_aux_probs / moe_aux_counts_at_loss (non-persistent),
// with load_balance "aux_loss" only.
void add_moe_aux_loss_buffers(Module& root, const MoeConfig& m);
// The state over `root`'s allocated buffers (disabled when the model has none).
MoeAuxLoss moe_aux_loss_state(Module& root, const ModelConfig& c);

// Before a forward: zeroes both buffers.
void moe_aux_loss_begin(ExecContext& c, MoeAuxLoss& aux);
// In a MoE layer, on its router's softmax output: adds its column sums to S and returns the
// scores through the identity node whose backward adds the loss's gradient.
Value moe_aux_loss_scores(ExecContext& c, MoeAuxLoss& aux, Value scores, const std::string& name);
// In a MoE layer, on its router's histc `counts` [E]: adds them to C.
void moe_aux_loss_counts(ExecContext& c, const MoeAuxLoss& aux, const Tensor& counts,
                         const std::string& name);
// After the loss: loss += coeff E sum_e C_e S_e / T^2, in place; C copied for backward.
void moe_aux_loss_end(ExecContext& c, const MoeAuxLoss& aux, const Tensor& loss);

}  // namespace fullshard
