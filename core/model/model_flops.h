#pragma once
// The model FLOPs MFU counts, as torchtitan counts them (torchtitan/models/utils.py
// get_dense_model_nparams_and_flops; docs/report-format.md): 6 x non-embedding parameters
// + 12 x layers x heads x head_dim x seq per token. Recomputation (activation checkpointing)
// is not counted: MFU is model FLOPs over peak, so predicted and measured MFU compare.
#include <cstdint>

#include "core/model/model_config.h"

namespace fullshard {

double model_flops_per_token(const ModelConfig& m, int64_t seq_len);

}  // namespace fullshard
