#include "core/runtime/attention_args.h"

#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

void AttentionArgs::encode(OpCall& op) const {
  op.iargs = {batch, seq, heads, kv_heads, head_dim, packed ? 1 : 0};
  if (softmax_scale > 0) op.fargs = {softmax_scale};
  if (v_head_dim > 0 && v_head_dim != head_dim)
    op.iargs.insert(op.iargs.end(), {lse_len, kv_rows(), causal ? 1 : 0, q_stride_rows(),
                                     kv_stride_rows(), v_head_dim});
  else if (ring())
    op.iargs.insert(op.iargs.end(),
                    {lse_len, kv_rows(), causal ? 1 : 0, q_stride_rows(), kv_stride_rows()});
  else if (lse_len != seq)
    op.iargs.push_back(lse_len);
}

AttentionArgs AttentionArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.iargs.size() >= 6, op_where(op) + "needs iargs = {B, S, H, Hkv, hd, packed}");
  AttentionArgs a;
  a.batch = op.iargs[0];
  a.seq = op.iargs[1];
  a.heads = op.iargs[2];
  a.kv_heads = op.iargs[3];
  a.head_dim = op.iargs[4];
  a.packed = op.iargs[5] != 0;
  a.lse_len = op.iargs.size() >= 7 ? op.iargs[6] : a.seq;
  a.kv_seq = a.q_batch_rows = a.seq;
  if (op.iargs.size() >= 11) {  // a ring-attention round
    a.kv_seq = op.iargs[7];
    a.causal = op.iargs[8] != 0;
    a.q_batch_rows = op.iargs[9];
    a.kv_batch_rows = op.iargs[10];
  }
  if (op.iargs.size() >= 12) a.v_head_dim = op.iargs[11];
  if (op.iargs.size() < 11) a.kv_batch_rows = a.kv_seq;
  FULLSHARD_CHECK(a.kv_seq >= 0 && a.q_batch_rows >= a.seq && a.kv_batch_rows >= a.kv_seq &&
                      !(a.causal && a.kv_seq != a.seq) && !(a.packed && a.ring()),
                  op_where(op) + "bad ring-attention rows (kv_seq " + std::to_string(a.kv_seq) +
                      ", q / kv batch rows " + std::to_string(a.q_batch_rows) + " / " +
                      std::to_string(a.kv_batch_rows) + ")");
  FULLSHARD_CHECK(a.lse_len >= a.seq, op_where(op) + "logsumexp rows (iargs[6] " +
                                          std::to_string(a.lse_len) +
                                          ") shorter than the sequence " + std::to_string(a.seq));
  FULLSHARD_CHECK(a.batch >= 0 && a.seq >= 0 && a.heads > 0 && a.kv_heads > 0 && a.head_dim > 0 &&
                      a.heads % a.kv_heads == 0 && a.v_head_dim >= 0 &&
                      !(a.packed && a.vd() != a.head_dim),
                  op_where(op) + "bad attention dims (H must be a multiple of Hkv)");
  const int64_t D = a.heads * a.head_dim;
  a.group = a.heads / a.kv_heads;
  if (a.packed) {
    FULLSHARD_CHECK(a.heads == a.kv_heads, op_where(op) + "packed qkv needs H == Hkv");
    a.q_ld = a.kv_ld = 3 * D;
    a.k_off = D;
    a.v_off = 2 * D;
  } else {
    a.q_ld = D;
    a.kv_ld = a.kv_heads * a.head_dim;
  }
  a.v_ld = a.packed ? a.kv_ld : a.kv_heads * a.vd();
  FULLSHARD_CHECK(op.fargs.empty() || (op.fargs.size() == 1 && op.fargs[0] > 0),
                  op_where(op) + "fargs must be {softmax scale > 0} or empty");
  a.softmax_scale = op.fargs.empty() ? 0 : op.fargs[0];
  a.scale = static_cast<float>(
      a.softmax_scale > 0 ? a.softmax_scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  return a;
}

}  // namespace fullshard
