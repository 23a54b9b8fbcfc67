#include "core/runtime/tensor_parallel_args.h"

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

TransposeBlocksArgs TransposeBlocksArgs::decode(const OpCall& op) {
  check_arity(op, 1, 1);
  FULLSHARD_CHECK(op.iargs.size() == 3, op_where(op) + "needs iargs = {a, b, inner}");
  const TransposeBlocksArgs t{op.iargs[0], op.iargs[1], op.iargs[2]};
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(t.a > 0 && t.b > 0 && t.inner > 0 && x.numel() == t.a * t.b * t.inner &&
                      y.numel() == x.numel() && x.dtype == y.dtype,
                  op_where(op) + "in and out must both hold a * b * inner elements of one dtype");
  return t;
}

void NarrowCopyArgs::encode(OpCall& op) const {
  op.iargs = {n, in_width, in_offset, out_width, out_offset};
  op.fargs = {scale};
}

NarrowCopyArgs NarrowCopyArgs::decode(const OpCall& op) {
  check_arity(op, 1, 1);
  FULLSHARD_CHECK(op.iargs.size() >= 5,
                  op_where(op) + "needs iargs = {n, in_width, in_offset, out_width, out_offset}");
  const std::vector<int64_t>& i = op.iargs;
  NarrowCopyArgs c{i[0], i[1], i[2], i[3], i[4], op.fargs.empty() ? 1.0 : op.fargs[0], 0};
  const TensorMeta &x = op.inputs[0].meta, &y = op.outputs[0].meta;
  FULLSHARD_CHECK(c.n > 0 && c.in_width > 0 && c.out_width > 0 && c.in_offset >= 0 &&
                      c.out_offset >= 0 && c.in_offset + c.n <= c.in_width &&
                      c.out_offset + c.n <= c.out_width && x.numel() % c.in_width == 0 &&
                      y.numel() % c.out_width == 0 &&
                      x.numel() / c.in_width == y.numel() / c.out_width,
                  op_where(op) + "the blocks of in and out do not match");
  c.blocks = x.numel() / c.in_width;
  return c;
}

void VocabParallelArgs::encode(OpCall& op) const {
  op.iargs = {dim, start};
  if (op.kind == OpKind::kNllVocabParallelBackward) op.fargs = {scale};
}

VocabParallelArgs VocabParallelArgs::decode(const OpCall& op) {
  const bool backward = op.kind == OpKind::kNllVocabParallelBackward;
  check_arity(op, backward ? 3 : 2, 1);
  if (backward)
    FULLSHARD_CHECK(op.iargs.size() == 2 && op.fargs.size() == 1,
                    op_where(op) + "needs iargs = {D, start}, fargs = {scale}");
  else
    FULLSHARD_CHECK(op.iargs.size() == 2, op_where(op) + "needs iargs = {D, start}");
  const TensorMeta& lp = op.inputs[backward ? 1 : 0].meta;
  const TensorMeta& t = op.inputs[backward ? 2 : 1].meta;
  const TensorMeta& y = op.outputs[0].meta;
  FULLSHARD_CHECK(op.iargs[0] > 0 && lp.numel() % op.iargs[0] == 0,
                  op_where(op) + "needs iargs[0] = D dividing the input");
  VocabParallelArgs v;
  v.dim = op.iargs[0];
  v.start = op.iargs[1];
  v.rows = lp.numel() / v.dim;
  if (!backward) {
    FULLSHARD_CHECK(t.dtype == DType::kInt64 && t.numel() == v.rows && y.numel() == v.rows,
                    op_where(op) + "expects lp [R, D], int64 targets [R], out [R]");
    return v;
  }
  v.scale = op.fargs[0];
  FULLSHARD_CHECK(op.inputs[0].meta.numel() == 1 && t.numel() == v.rows && y.numel() == lp.numel(),
                  op_where(op) + "expects a scalar grad, lp [R, D], targets [R], out [R, D]");
  FULLSHARD_CHECK(t.dtype == DType::kInt64, op_where(op) + "targets must be int64");
  return v;
}

}  // namespace fullshard
