#include "core/runtime/repeat_kv_args.h"

#include <string>

#include "core/common/error.h"

namespace fullshard {

RepeatKvLayout decode_repeat_kv(const OpCall& op) {
  const std::string where = std::string(op_kind_name(op.kind)) + " '" + op.name + "': ";
  FULLSHARD_CHECK(op.kind == OpKind::kRepeatKV || op.kind == OpKind::kRepeatKVBackward,
                  where + "is not a repeat_kv op");
  FULLSHARD_CHECK(op.inputs.size() == 1 && op.outputs.size() == 1,
                  where + "expected 1 inputs and 1 outputs, got " +
                      std::to_string(op.inputs.size()) + " and " +
                      std::to_string(op.outputs.size()));
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
