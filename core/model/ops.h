#pragma once
// The model's ops. Each one allocates its outputs, launches its kernel with its cost
// (FLOPs and bytes moved), and records an autograd node that saves exactly the tensors
// PyTorch eager autograd saves for the same op (docs/ops.md lists them per op).
#include <string>
#include <utility>

#include "core/model/autograd.h"
#include "core/runtime/rope_args.h"

namespace fullshard::ops {

// ---- plain kernels (no autograd) ----
Tensor add_new(Backend& b, const Tensor& x, const Tensor& y, MemCategory cat,
               const std::string& name);
void add_into(Backend& b, Tensor& dst, const Tensor& src, const std::string& name,
              StreamRole s = StreamRole::kDefault);
// dst <- src (cast when dtypes differ). Same numel required.
void copy_into(Backend& b, StreamRole s, const Tensor& dst, const Tensor& src,
               const std::string& name);
Tensor cast(Backend& b, StreamRole s, const Tensor& src, DType to, MemCategory cat,
            const std::string& name);
void fill_zero(Backend& b, StreamRole s, const Tensor& t, const std::string& name);
// Initialises `t`, FSDP2's Shard(1) shard `rank` of `world` of `p`: every dim-0 row's columns
// [rank, rank + 1) x (row / world) of the full row (the layout of NOTE [Shard(i) placement]).
void init_param_dim1_shard(Backend& b, StreamRole s, const Tensor& t, const Param& p, int world,
                           int rank);
// Initialises the padded 1-D shard `t` of `p` holding full rows [row_offset, row_offset +
// local_rows) (OpKind::kInitParam).
void init_param(Backend& b, StreamRole s, const Tensor& t, const Param& p, int64_t row_offset,
                int64_t local_rows);
void scale_inplace(Backend& b, StreamRole s, const Tensor& t, double factor,
                   const std::string& name);

// ---- differentiable ops over Values ----
// Token ids [B, S] (int64) -> [B, S, D].
Value embedding(ExecContext& c, const Tensor& ids, const Param& weight, const std::string& name);
// x + wpe[first_position : first_position + S] (GPT-2 learned positions; a sequence shard of
// tensor parallelism starts at its first position).
Value position_embedding(ExecContext& c, Value x, const Param& wpe, const std::string& name,
                         int64_t first_position = 0);
Value rms_norm(ExecContext& c, Value x, const Param& weight, double eps, const std::string& name);
// x.to(dt) / x.float() / type_as: x itself when it has the dtype, else a cast copy whose node
// saves nothing and casts the gradient back (ToCopyBackward0).
Value to_dtype(ExecContext& c, Value x, DType dt, const std::string& name);
// rms_norm=eager: x.float(), pow(2), mean(-1, keepdim), + eps, rsqrt, mul, type_as, * weight,
// one kernel and one autograd node each (NOTE [Eager RMSNorm] in eager_norm.cc).
Value rms_norm_eager(ExecContext& c, Value x, const Param& weight, double eps,
                     const std::string& name);
Value layer_norm(ExecContext& c, Value x, const Param& weight, const Param& bias, double eps,
                 const std::string& name);
// y = x @ W^T (+ b). W: [N, K]. An "mm" for op-level selective checkpointing.
Value linear(ExecContext& c, Value x, const Param& weight, const Param* bias,
             const std::string& name);
// Rotary embedding on [B, S, H*hd] (fused kernel; saves nothing but the freqs buffer).
Value rope(ExecContext& c, Value x, int64_t head_dim, const RopeParams& freqs,
           const std::string& name);
// rope=complex (torchtitan apply_rotary_emb): xq.float() / xk.float() (copies unless fp32),
// view_as_complex (ADJACENT pairs) * freqs_cis (fp32 outputs; the mul saves only the freqs_cis
// buffer, which needs no grad), view_as_real, type_as: NOTE [Complex RoPE] in eager_rope.cc.
std::pair<Value, Value> rope_complex(ExecContext& c, Value q, Value k, int64_t head_dim,
                                     const RopeParams& freqs, const std::string& q_name,
                                     const std::string& k_name);
// rope=rotate_half (HF transformers): cos / sin [B, S, hd] in `dt`, computed once per forward
// (LlamaRotaryEmbedding), and q * cos + rotate_half(q) * sin for q and k (NOTE [Rotate-half
// RoPE] in rotate_half_rope.cc).
struct RotaryTables {
  Tensor cos, sin;
};
RotaryTables rotary_cos_sin(ExecContext& c, int64_t batch, int64_t seq, int64_t head_dim,
                            const RopeParams& freqs, DType dt, const std::string& name);
std::pair<Value, Value> rope_rotate_half(ExecContext& c, Value q, Value k, const RotaryTables& t,
                                         int64_t head_dim, const std::string& q_name,
                                         const std::string& k_name);
// gqa=repeat_kv (torchtitan repeat_kv): x[:, :, :, None].expand(B, S, Hkv, n_rep, hd)
// .reshape(B, S, H, hd): a materialised [B, S, H*hd] copy; backward sums the n_rep copies.
Value repeat_kv(ExecContext& c, Value x, int64_t kv_heads, int64_t n_rep, int64_t head_dim,
                const std::string& name);

struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  // Multi-head latent attention (core/model/mla_attention.h): v's (and O's) head size when it
  // differs from q / k's, and SDPA's `scale` argument. 0: head_dim, 1 / sqrt(head_dim).
  int64_t v_head_dim = 0;
  double scale = 0;
  int64_t vd() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
};
// Causal flash attention (scaled_dot_product_attention, flash backend) with native GQA.
// q: [B, S, H*hd], k/v: [B, S, Hkv*hd]. Returns O in SDPA's [B, H, S, hd] layout; saves
// q, k, v, O and logsumexp [B, H, S] fp32.
Value attention(ExecContext& c, Value q, Value k, Value v, const AttentionShape& s,
                const std::string& name);
// GPT-2: q, k, v packed in one [B, S, 3*D] tensor (saved once; grad packed as well).
Value attention_packed(ExecContext& c, Value qkv, const AttentionShape& s, const std::string& name);
// O.transpose(1, 2).contiguous().view(B, S, H*vd): a view (NOTE [SDPA output layout]).
Value transpose_heads(ExecContext& c, Value o, const AttentionShape& s, const std::string& name);

Value silu(ExecContext& c, Value x, const std::string& name);
Value gelu(ExecContext& c, Value x, const std::string& name);
Value mul(ExecContext& c, Value a, Value b, const std::string& name);
Value add(ExecContext& c, Value a, Value b, const std::string& name);
// x.float(): a copy into fp32 (x itself when already fp32) whose backward casts the gradient
// back to x's dtype (ToCopyBackward saves nothing). The caller's `x` is consumed.
Value to_float(ExecContext& c, Value x, const std::string& name);
// F.cross_entropy(logits.float(), labels): .float() (a copy unless already fp32),
// log_softmax (saves its fp32 output), nll_loss (mean). Returns the fp32 scalar loss.
// upcast = false: F.cross_entropy(logits, labels) in the logits' dtype (output and total
// weight too, as nll_loss gives them).
Value cross_entropy(ExecContext& c, Value logits, const Tensor& labels, const std::string& name,
                    bool upcast = true);

}  // namespace fullshard::ops
