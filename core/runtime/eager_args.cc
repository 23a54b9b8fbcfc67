#include "core/runtime/eager_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

ScalarArgs ScalarArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(!op.fargs.empty(), op_where(op) + "needs fargs[0] = " +
                                         (op.kind == OpKind::kScale ? "factor" : "the scalar"));
  const int64_t n = decode_unary(op);
  return {op.fargs[0], n};
}

void MulBroadcastArgs::encode(OpCall& op) const {
  op.iargs = {mode, dim};
  if (mode == kPerHead) op.iargs.push_back(head_dim);
}

MulBroadcastArgs MulBroadcastArgs::decode(const OpCall& op) {
  check_arity(op, 2, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 2, op_where(op) + "needs iargs = {per_column, D}");
  const TensorMeta &a = op.inputs[0].meta, &b = op.inputs[1].meta, &y = op.outputs[0].meta;
  MulBroadcastArgs m;
  m.mode = op.iargs[0] == kPerColumn ? kPerColumn : op.iargs[0] == kPerHead ? kPerHead : kPerRow;
  m.dim = op.iargs[1];
  FULLSHARD_CHECK(m.dim > 0 && a.numel() % m.dim == 0 && y.numel() == a.numel(),
                  op_where(op) + "a and out must be [rows, D]");
  m.rows = a.numel() / m.dim;
  m.head_dim = m.mode == kPerHead && op.iargs.size() >= 3 ? op.iargs[2] : 0;
  FULLSHARD_CHECK(m.mode != kPerHead || (m.head_dim > 0 && m.dim % m.head_dim == 0),
                  op_where(op) + "mode 2 needs iargs[2] = head_dim dividing D");
  const int64_t want = m.mode == kPerHead     ? m.rows * m.head_dim
                       : m.mode == kPerColumn ? m.dim
                                              : m.rows;
  FULLSHARD_CHECK(
      b.numel() == want,
      op_where(op) + "b must be [D] (per column), [rows] (per row) or [rows, head_dim] (per head)");
  return m;
}

void RowArgs::encode(OpCall& op) const {
  op.iargs = {dim};
  if (has_scale) op.fargs = {scale};
}

RowArgs RowArgs::decode(const OpCall& op) {
  const bool two_inputs = op.kind == OpKind::kSubRow, expand = op.kind == OpKind::kExpandLastDim;
  check_arity(op, two_inputs ? 2 : 1, 1);
  // The [R, D] operand: the output of kExpandLastDim, else the (first) input.
  const TensorMeta& full = expand ? op.outputs[0].meta : op.inputs[0].meta;
  FULLSHARD_CHECK(!op.iargs.empty() && op.iargs[0] > 0 && full.numel() % op.iargs[0] == 0,
                  op_where(op) + "needs iargs[0] = D dividing the input");
  RowArgs r;
  r.dim = op.iargs[0];
  r.rows = full.numel() / r.dim;
  const TensorMeta& y = op.outputs[0].meta;
  switch (op.kind) {
    case OpKind::kSumLastDim:
    case OpKind::kRowMax:
      FULLSHARD_CHECK(y.numel() == r.rows, op_where(op) + "output must have one element per row");
      break;
    case OpKind::kSumLeadingDims:
      FULLSHARD_CHECK(y.numel() == r.dim, op_where(op) + "output must be [D]");
      break;
    case OpKind::kExpandLastDim:
      FULLSHARD_CHECK(op.inputs[0].meta.numel() == r.rows,
                      op_where(op) + "input must have one element per output row");
      FULLSHARD_CHECK(!op.fargs.empty(), op_where(op) + "needs fargs[0] = scale");
      break;
    case OpKind::kSubRow:
      FULLSHARD_CHECK(op.inputs[1].meta.numel() == r.rows && y.numel() == full.numel(),
                      op_where(op) + "expects a [R, D], b [R], out [R, D]");
      break;
    default: FULLSHARD_CHECK(false, op_where(op) + "is not a row op");
  }
  r.has_scale =
      !op.fargs.empty() && (op.kind == OpKind::kSumLastDim || op.kind == OpKind::kExpandLastDim);
  if (r.has_scale) r.scale = op.fargs[0];
  return r;
}

}  // namespace fullshard
