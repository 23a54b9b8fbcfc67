#pragma once
// A mixture-of-experts feed-forward (torchtitan's MoEArgs, torchtitan/models/moe/moe.py at
// pytorch/torchtitan@08dc75a): how many routed experts, how a token picks its top-k, the shared
// expert, load balancing, and which decoder layers are MoE. num_experts 0: a dense model.
#include <cstdint>
#include <vector>

namespace fullshard {

// TokenChoiceTopKRouter.score_func: softmax over the experts, or an independent sigmoid each.
enum class MoeScoreFunc : uint8_t { kSoftmax, kSigmoid };

// How expert load is balanced: not at all; an auxiliary loss (HF Mixtral / Qwen-MoE
// router_aux_loss_coef with output_router_logits); or DeepSeek-V3's aux-loss-free expert bias
// (torchtitan load_balance_coeff: a float32 [experts] buffer added to the scores for top-k).
enum class MoeLoadBalance : uint8_t { kNone, kAuxLoss, kExpertBias };

// Which of an expert's routed tokens past its capacity are dropped (NOTE [Capacity factor] in
// moe_routing.h; Megatron-LM's moe_token_drop_policy): the lowest routing scores, or the last
// tokens of the batch.
enum class MoeDropPolicy : uint8_t { kProbs, kPosition };

struct MoeConfig {
  int64_t num_experts = 0;          // routed experts per MoE layer; 0: dense model
  int64_t top_k = 0;                // experts each token is routed to
  int64_t expert_dim = 0;           // hidden size of one routed expert (moe_inter_dim)
  int64_t shared_expert_dim = 0;    // hidden size of the shared FFN (torchtitan: num_shared_experts
                                    // * expert_dim; qwen2_moe: shared_expert_intermediate_size); 0:
                                    // none
  bool shared_expert_gate = false;  // qwen2_moe: sigmoid(Linear(dim, 1)) scales the shared FFN
  MoeScoreFunc score_func = MoeScoreFunc::kSoftmax;
  bool route_norm = false;            // top-k scores divided by their sum (HF norm_topk_prob)
  double route_scale = 1.0;           // top-k scores times this (DeepSeek routed_scaling_factor)
  bool score_before_experts = false;  // scale the routed input (true) or the experts' output
  MoeLoadBalance load_balance = MoeLoadBalance::kNone;
  double load_balance_coeff = 0;  // aux-loss coefficient or expert-bias update rate
  // DeepSeek's group-limited routing (torchtitan num_expert_groups / num_limited_groups, HF n_group
  // / topk_group): the experts in num_expert_groups groups, each token's top-k taken from its
  // num_limited_groups best groups, a group scored by the sum of its top two experts
  // (torchtitan's _get_node_limited_routing_scores; NOTE [Expert bias]). 1 / 1: no grouping.
  int64_t num_expert_groups = 1;
  int64_t num_limited_groups = 1;
  // Which layers are MoE: layer i (0-based) is MoE when i >= first_dense_layers, (i + 1) %
  // interleave_step == 0 and i is not in dense_layers (DeepSeek first_k_dense_replace, Qwen
  // decoder_sparse_step / Llama 4 interleave_moe_layer_step, Qwen mlp_only_layers). The other
  // layers keep the dense FFN of ModelConfig::ffn_dim.
  int64_t first_dense_layers = 0;
  int64_t interleave_step = 1;
  std::vector<int64_t> dense_layers;
  // torchtitan's TOKEN_GROUP_ALIGN_SIZE_M (torchtitan/models/moe/utils.py): each expert's token
  // group is padded to a multiple of this for the grouped GEMM (8 bf16, 16 fp8, 32 mxfp8).
  int64_t token_group_align = 8;
  // Token dropping (scenario model.moe.capacity_factor, NOTE [Capacity factor] in
  // moe_routing.h): each expert takes at most ceil(N K / E x capacity_factor) of a rank's N
  // tokens per call, the rest of its tokens are dropped by drop_policy. 0: dropless, as
  // torchtitan routes.
  double capacity_factor = 0;
  MoeDropPolicy drop_policy = MoeDropPolicy::kProbs;
  // The routing the recorded program assumes (scenario training.moe_routing, NOTE [MoE routing
  // assumption] in moe_routing.h): the hottest expert gets this times its balanced share.
  double hot_expert_factor = 1.0;
  // training.moe_routing {"expert_load": ...}: each expert's share of the routed tokens (one per
  // expert, summing to 1), which replaces hot_expert_factor when given (NOTE [Expert load] in
  // moe_routing.h); empty: hot_expert_factor.
  std::vector<double> expert_load;

  bool enabled() const { return num_experts > 0; }
  bool drops_tokens() const { return capacity_factor > 0; }
  bool is_moe_layer(int64_t layer) const;
  int64_t moe_layer_count(int64_t n_layers) const;
};

}  // namespace fullshard
