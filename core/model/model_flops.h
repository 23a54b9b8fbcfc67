#pragma once
// The model FLOPs MFU counts, as torchtitan counts them (torchtitan/models/utils.py
// get_dense_model_nparams_and_flops; docs/report-format.md): 6 x non-embedding parameters
// + 12 x layers x heads x head_dim x seq per token. Recomputation (activation checkpointing)
// is not counted: MFU is model FLOPs over peak, so predicted and measured MFU compare.
#include <cstdint>

#include "core/model/model_config.h"

namespace fullshard {

// The parameters a token runs through: a MoE model's routed experts count top_k / num_experts
// of theirs (torchtitan get_moe_model_nparams_and_flops: dense + router + shared experts +
// experts * top_k // num_experts). parameter_count for a dense model.
int64_t active_parameter_count(const ModelConfig& m);

// With a MoE model, 6 x the non-embedding *active* parameters (active_parameter_count).
double model_flops_per_token(const ModelConfig& m, int64_t seq_len);

}  // namespace fullshard
