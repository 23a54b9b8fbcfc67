#include "core/runtime/float8_args.h"

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

int64_t Float8CastArgs::scale_numel() const {
  if (granularity == 0) return 1;
  return axis == 0 ? cols : rows;
}

Float8CastArgs Float8CastArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 7, op_where(op) +
                                            "needs iargs = {granularity, axis, rows, "
                                            "cols, step, target, pow2}");
  const Float8CastArgs a{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3],
                         op.iargs[4], op.iargs[5], op.iargs[6]};
  FULLSHARD_CHECK((a.granularity == 0 || a.granularity == 1) && (a.axis == 0 || a.axis == -1) &&
                      a.rows >= 0 && a.cols >= 0 && a.step >= 0 &&
                      (a.target == 0 || a.target == 1) && (a.pow2 == 0 || a.pow2 == 1),
                  op_where(op) + "has a bad granularity, axis, shape or step");
  const int64_t n = a.rows * a.cols, s = a.scale_numel();
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& y = op.outputs[0].meta;
  auto want = [&](bool ok, const char* what) { FULLSHARD_CHECK(ok, op_where(op) + what); };
  switch (op.kind) {
    case OpKind::kFloat8Abs:
      want(x.numel() == n && y.numel() == n, "expects x and |x| alike");
      break;
    case OpKind::kFloat8Amax: want(x.numel() == n && y.numel() == s, "expects x -> amax"); break;
    case OpKind::kFloat8Scale:
      want(x.numel() == s && y.numel() == s, "expects amax -> scale");
      break;
    case OpKind::kFloat8Cast:
      want(x.numel() == n && y.numel() == n, "expects x -> x cast");
      want(op.inputs.size() == 1 || op.inputs[1].meta.numel() == s, "expects scale of the axis");
      want(a.step != 0 && a.step != 4 ? true : is_float8(y.dtype),
           "expects a float8 output from its last step");
      want(a.step != 0 || (op.outputs.size() == 2 && op.outputs[1].meta.numel() == s),
           "expects (x8, scale) out of the compiled kernel");
      break;
    default: want(false, "is not a float8 cast kind");
  }
  return a;
}

ScaledMmArgs ScaledMmArgs::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(op.iargs.size() >= 3 && op.iargs[0] >= 0 && op.iargs[1] >= 0 && op.iargs[2] >= 0,
                  op_where(op) + "needs iargs = {M, K, N}");
  const ScaledMmArgs a{op.iargs[0], op.iargs[1], op.iargs[2]};
  const TensorMeta& p = op.inputs[0].meta;
  const TensorMeta& q = op.inputs[1].meta;
  const int64_t out = op.outputs[0].meta.numel();
  FULLSHARD_CHECK(is_float8(p.dtype) && is_float8(q.dtype),
                  op_where(op) + "expects float8 operands");
  bool ok = false;
  switch (op.kind) {
    case OpKind::kScaledMM:
      ok = p.numel() == a.m * a.k && q.numel() == a.n * a.k && out == a.m * a.n;
      break;
    case OpKind::kScaledMMBackwardInput:
      ok = p.numel() == a.m * a.n && q.numel() == a.n * a.k && out == a.m * a.k;
      break;
    case OpKind::kScaledMMBackwardWeight:
      ok = p.numel() == a.m * a.n && q.numel() == a.m * a.k && out == a.n * a.k;
      break;
    default: break;
  }
  FULLSHARD_CHECK(ok, op_where(op) + "has operands that do not match {M, K, N}");
  return a;
}

}  // namespace fullshard
