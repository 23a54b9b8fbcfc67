#include "core/runtime/rope_args.h"

#include <string>

#include "core/runtime/cp_layout.h"
#include "core/runtime/op_args.h"

namespace fullshard {

namespace {
void check_rope_fargs(const OpCall& op) {
  FULLSHARD_CHECK(op.fargs.size() == 1 || op.fargs.size() == 5 || op.fargs.size() == 6,
                  op_where(op) +
                      "fargs must be {theta}, {theta, factor, low, high, original} or "
                      "{theta, factor, beta_fast, beta_slow, original, 1} (YaRN)");
}
// The cp degree and index of iargs[at, at + 1] (absent: no context parallelism).
void decode_cp(const OpCall& op, size_t at, int64_t& cp, int64_t& index) {
  if (op.iargs.size() < at + 2) return;
  cp = op.iargs[at];
  index = op.iargs[at + 1];
  FULLSHARD_CHECK(
      cp >= 1 && index >= 0 && index < cp,
      op_where(op) + "bad cp degree / index " + std::to_string(cp) + " / " + std::to_string(index));
}
}  // namespace

int64_t RopeArgs::position(int64_t row) const {
  return cp_global_position(row % seq, seq, rope.cp, rope.cp_index);
}

int64_t RotaryCosSinArgs::position(int64_t row) const {
  return cp_global_position(row % seq, seq, rope.cp, rope.cp_index);
}

void RopeArgs::encode(OpCall& op) const {
  op.iargs = {head_dim};
  if (rope.cp > 1) op.iargs.insert(op.iargs.end(), {rope.cp, rope.cp_index});
  op.fargs = rope.fargs();
}

RopeArgs RopeArgs::decode_tensor(const OpCall& op, const TensorMeta& x, const TensorMeta& y,
                                 int64_t hd) {
  FULLSHARD_CHECK(x.shape.size() >= 2, op_where(op) + "x must be [..., S, H*hd]");
  RopeArgs a;
  a.head_dim = hd;
  a.width = x.shape.back();
  a.seq = x.shape[x.shape.size() - 2];
  FULLSHARD_CHECK(hd > 0 && hd % 2 == 0 && a.width % hd == 0,
                  op_where(op) + "head_dim must be even and divide the last dim");
  FULLSHARD_CHECK(y.numel() == x.numel(), op_where(op) + "output size differs from x");
  a.rows = a.seq == 0 || a.width == 0 ? 0 : x.numel() / a.width;
  return a;
}

RopeArgs RopeArgs::decode(const OpCall& op) {
  check_arity(op, 1, 1);
  FULLSHARD_CHECK(!op.iargs.empty() && !op.fargs.empty(),
                  op_where(op) + "needs iargs[0] = head_dim, fargs[0] = theta");
  RopeArgs a = decode_tensor(op, op.inputs[0].meta, op.outputs[0].meta, op.iargs[0]);
  check_rope_fargs(op);
  a.rope = RopeParams::from_fargs(op.fargs);
  decode_cp(op, 1, a.rope.cp, a.rope.cp_index);
  return a;
}

void CompiledRopeArgs::encode(OpCall& op) const {
  op.iargs = {head_dim, adjacent ? 1 : 0};
  if (rope.cp > 1) op.iargs.insert(op.iargs.end(), {rope.cp, rope.cp_index});
  op.fargs = rope.fargs();
}

CompiledRopeArgs CompiledRopeArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.iargs.size() == 2 || op.iargs.size() == 4,
                  op_where(op) + "needs iargs {head_dim, adjacent[, cp, cp_index]}");
  CompiledRopeArgs a;
  a.tensors = op.kind == OpKind::kCompiledRoPEBackward ? 1 : 2;
  check_arity(op, a.tensors, a.tensors);
  a.head_dim = op.iargs[0];
  a.adjacent = op.iargs[1] != 0;
  FULLSHARD_CHECK(!op.fargs.empty(), op_where(op) + "needs iargs[0] = head_dim, fargs[0] = theta");
  for (size_t i = 0; i < a.tensors; ++i)
    a.tensor[i] = RopeArgs::decode_tensor(op, op.inputs[i].meta, op.outputs[i].meta, a.head_dim);
  check_rope_fargs(op);
  a.rope = RopeParams::from_fargs(op.fargs);
  decode_cp(op, 2, a.rope.cp, a.rope.cp_index);
  for (size_t i = 0; i < a.tensors; ++i) a.tensor[i].rope = a.rope;
  return a;
}

void RotaryCosSinArgs::encode(OpCall& op) const {
  op.iargs = {head_dim};
  if (rope.cp > 1) op.iargs.insert(op.iargs.end(), {rope.cp, rope.cp_index});
  op.fargs = rope.fargs();
}

RotaryCosSinArgs RotaryCosSinArgs::decode(const OpCall& op) {
  check_arity(op, 0, 2);
  FULLSHARD_CHECK(!op.iargs.empty() && !op.fargs.empty(),
                  op_where(op) + "needs iargs[0] = head_dim, fargs[0] = theta");
  const TensorMeta &c = op.outputs[0].meta, &s = op.outputs[1].meta;
  RotaryCosSinArgs a;
  a.head_dim = op.iargs[0];
  FULLSHARD_CHECK(c.shape.size() >= 2 && c.shape.back() == a.head_dim && a.head_dim > 0 &&
                      a.head_dim % 2 == 0 && s.numel() == c.numel(),
                  op_where(op) + "cos and sin must be [B, S, head_dim] with an even head_dim");
  check_rope_fargs(op);
  a.rope = RopeParams::from_fargs(op.fargs);
  a.seq = c.shape[c.shape.size() - 2];
  a.rows = c.numel() / a.head_dim;
  decode_cp(op, 1, a.rope.cp, a.rope.cp_index);
  return a;
}

void RotateHalfCatArgs::encode(OpCall& op) const { op.iargs = {head_dim}; }

RotateHalfCatArgs RotateHalfCatArgs::decode(const OpCall& op) {
  check_arity(op, 2, 1);
  FULLSHARD_CHECK(!op.iargs.empty(), op_where(op) + "needs iargs[0] = head_dim");
  const int64_t hd = op.iargs[0];
  const TensorMeta &n = op.inputs[0].meta, &x = op.inputs[1].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(hd > 0 && hd % 2 == 0 && x.numel() % hd == 0 && n.numel() * 2 == x.numel() &&
                      y.numel() == x.numel(),
                  op_where(op) + "expects -x2 [.., hd/2], x [.., hd] and out [.., hd]");
  return {hd, x.numel() / hd};
}

}  // namespace fullshard
