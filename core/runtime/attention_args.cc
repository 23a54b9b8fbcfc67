#include "core/runtime/attention_args.h"

#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

void AttentionArgs::encode(OpCall& op) const {
  op.iargs = {batch, seq, heads, kv_heads, head_dim, packed ? 1 : 0};
  if (lse_len != seq) op.iargs.push_back(lse_len);
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
  FULLSHARD_CHECK(a.lse_len >= a.seq, op_where(op) + "logsumexp rows (iargs[6] " +
                                          std::to_string(a.lse_len) +
                                          ") shorter than the sequence " + std::to_string(a.seq));
  FULLSHARD_CHECK(a.batch >= 0 && a.seq >= 0 && a.heads > 0 && a.kv_heads > 0 && a.head_dim > 0 &&
                      a.heads % a.kv_heads == 0,
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
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  return a;
}

}  // namespace fullshard
