#pragma once
// The typed arguments of the attention ops (kAttention and its efficient / cuDNN variants,
// forward and backward), decoded and checked once here for the CPU reference, the CUDA plan and
// the simulator's kernel shapes (NOTE [One op table] in op_table.h).
//   iargs {B, S, H, Hkv, hd, packed[, lse_len]}: q [B, S, H*hd], k and v [B, S, Hkv*hd], or one
//   packed qkv [B, S, 3*H*hd] (H == Hkv); the logsumexp rows lse_len >= S long (efficient
//   attention pads them to a multiple of 32; absent: S)
//   ring rounds (context parallelism, core/model/ring_attention.cc) add
//   {.., lse_len, kv_seq, causal, q_batch_rows, kv_batch_rows}
//   multi-head latent attention (core/model/mla_attention.cc) adds all of those and v_head_dim:
//   v [B, S, Hkv*vd], O [B, S, H*vd] with vd != hd
//   fargs {scale} when the softmax scale is not 1 / sqrt(hd) (MLA's; absent: 1 / sqrt(hd))
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

struct AttentionArgs {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool packed = false;
  int64_t lse_len = 0;
  // The layout they give, in elements: row strides of q and k / v, column offsets of q, k, v
  // inside their token rows (non-zero when packed), the GQA group H / Hkv, 1 / sqrt(hd).
  int64_t q_ld = 0, kv_ld = 0, q_off = 0, k_off = 0, v_off = 0, group = 1;
  float scale = 1;
  // MLA (NOTE [Multi-head latent attention] in core/model/mla_attention.cc): v's head size,
  // O's too (0: head_dim), its row stride, and the softmax scale it sets (0: 1 / sqrt(hd)).
  int64_t v_head_dim = 0, v_ld = 0;
  double softmax_scale = 0;
  int64_t vd() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  // A ring-attention round (NOTE [Ring attention rounds] in core/runtime/cp_layout.h): k / v of
  // kv_seq rows per batch (else seq), a full block (no causal mask) when !causal, and the rows
  // from one batch's first row to the next's in q (and in O and dO of a backward) and in k / v:
  // more than the rows used when an operand is one half of a local sequence (a strided view).
  // Outputs are contiguous. 0 (unset) means seq for kv_seq and q_batch_rows, and kv_seq for
  // kv_batch_rows; decode sets all of them.
  int64_t kv_seq = 0;
  bool causal = true;
  int64_t q_batch_rows = 0, kv_batch_rows = 0;
  int64_t kv_rows() const { return kv_seq > 0 ? kv_seq : seq; }
  int64_t q_stride_rows() const { return q_batch_rows > 0 ? q_batch_rows : seq; }
  int64_t kv_stride_rows() const { return kv_batch_rows > 0 ? kv_batch_rows : kv_rows(); }
  bool ring() const {
    return kv_rows() != seq || !causal || q_stride_rows() != seq || kv_stride_rows() != kv_rows();
  }

  void encode(OpCall& op) const;
  static AttentionArgs decode(const OpCall& op);
};

}  // namespace fullshard
