#include "core/runtime/repeat_kv_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

RepeatKvArgs RepeatKvArgs::decode(const OpCall& op) {
  const std::string where = op_where(op);
  FULLSHARD_CHECK(op.kind == OpKind::kRepeatKV || op.kind == OpKind::kRepeatKVBackward,
                  where + "is not a repeat_kv op");
  check_arity(op, 1, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 3, where + "needs iargs = {kv_heads, n_rep, head_dim}");
  const bool backward = op.kind == OpKind::kRepeatKVBackward;
  const TensorMeta& small = backward ? op.outputs[0].meta : op.inputs[0].meta;
  const TensorMeta& big = backward ? op.inputs[0].meta : op.outputs[0].meta;
  const int64_t kv = op.iargs[0], rep = op.iargs[1], hd = op.iargs[2];
  FULLSHARD_CHECK(kv > 0 && rep > 0 && hd > 0 && small.numel() % (kv * hd) == 0,
                  where + "the kv tensor is not [rows, kv_heads * head_dim]");
  const int64_t rows = small.numel() / (kv * hd);
  FULLSHARD_CHECK(big.numel() == rows * kv * rep * hd,
                  where + "the repeated tensor is not [rows, n_heads * head_dim]");
  return {rows, kv, rep, hd};
}

}  // namespace fullshard
