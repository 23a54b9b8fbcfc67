#pragma once
// DeepSeek's multi-head latent attention (MLA) as torchtitan's deepseek_v3 `Attention` runs it,
// composed from the dense ops (NOTE [Multi-head latent attention] in mla_attention.cc).
#include <string>
#include <utility>

#include "core/model/autograd.h"
#include "core/model/model_config.h"
#include "core/model/module.h"

namespace fullshard {

// The attention module's children and their shapes (wq or wq_a / q_norm / wq_b, wkv_a, kv_norm,
// wkv_b, wo), named as torchtitan names them.
void add_mla_attention(Module& attention, const ModelConfig& c);

// attention(x) for x [B, S, dim]; `freqs` are the RoPE frequencies (of qk_rope_head_dim).
Value mla_attention(ExecContext& c, Module& m, Value x, int64_t batch, int64_t seq,
                    const ModelConfig& cfg, const RopeParams& freqs);

namespace ops {
// torch.split(x, [w0, w1], dim=-1) of x [B, S, heads * (w0 + w1)] (rows of w0 + w1): two copies
// [B, S, heads * w0] and [B, S, heads * w1] (kNarrowCopy; PyTorch's are views). Backward: one
// gradient of x's size, cat(g0, g1) per row (SplitWithSizesBackward), zeros where none arrived.
std::pair<Value, Value> split_last(ExecContext& c, Value x, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t w0, int64_t w1, const std::string& name);
// torch.cat([a, b], dim=-1) of rows of wa and wb (heads of them per token): [B, S, heads * (wa +
// wb)] (kCopy's row concat). Backward: each input's columns of the gradient (kNarrowCopy; PyTorch's
// are views).
Value cat_last(ExecContext& c, Value a, Value b, int64_t batch, int64_t seq, int64_t heads,
               int64_t wa, int64_t wb, const std::string& name);
}  // namespace ops

}  // namespace fullshard
