#include "core/runtime/norm_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

namespace {
int64_t last_dim(const TensorMeta& m) { return m.shape.empty() ? 1 : m.shape.back(); }

// Rows of x's last dim, which w must hold.
void norm_rows(const OpCall& op, const TensorMeta& x, const TensorMeta& w, int64_t* rows,
               int64_t* dim) {
  const int64_t D = last_dim(x);
  FULLSHARD_CHECK(D > 0 && w.numel() == D, op_where(op) + "weight must have the last dim of x");
  *rows = x.numel() / D;
  *dim = D;
}

void check_stat(const OpCall& op, const TensorMeta& m, int64_t rows, bool compiled) {
  FULLSHARD_CHECK(m.dtype == DType::kFloat32 && m.numel() == rows,
                  op_where(op) + (compiled ? "rstd must be fp32 [rows]"
                                           : "row statistics must be fp32 [rows]"));
}
}  // namespace

NormArgs NormArgs::decode(const OpCall& op) {
  const bool layer = op.kind == OpKind::kLayerNorm, add = op.kind == OpKind::kCompiledAddRMSNorm,
             compiled = add || op.kind == OpKind::kCompiledRMSNorm;
  FULLSHARD_CHECK(layer || compiled || op.kind == OpKind::kRMSNorm,
                  op_where(op) + "is not a norm op");
  check_arity(op, layer || add ? 3 : 2, layer ? 3 : 2);
  NormArgs n;
  n.weight = add ? 2 : 1;
  const TensorMeta& x = op.inputs[0].meta;
  if (!compiled) FULLSHARD_CHECK(!op.fargs.empty(), op_where(op) + "needs fargs[0] = eps");
  norm_rows(op, x, op.inputs[n.weight].meta, &n.rows, &n.dim);
  if (layer)
    FULLSHARD_CHECK(op.inputs[2].meta.numel() == n.dim,
                    op_where(op) + "bias must have the last dim of x");
  for (size_t i = 1; i < op.outputs.size(); ++i)
    check_stat(op, op.outputs[i].meta, n.rows, compiled);
  if (compiled)
    FULLSHARD_CHECK(
        op.outputs[0].meta.numel() == x.numel() && (!add || op.inputs[1].meta.numel() == x.numel()),
        op_where(op) + "operand sizes differ from x");
  else
    FULLSHARD_CHECK(op.outputs[0].meta.numel() == x.numel(),
                    op_where(op) + "output size differs from x");
  FULLSHARD_CHECK(!op.fargs.empty(), op_where(op) + "needs fargs[0] = eps");
  n.eps = op.fargs[0];
  return n;
}

NormBackwardLayout decode_norm_backward(const OpCall& op) {
  const bool layer = op.kind == OpKind::kLayerNormBackward;
  const bool input_only = op.kind == OpKind::kRMSNormBackwardInput;
  const bool weight_only = op.kind == OpKind::kRMSNormBackwardWeight;
  FULLSHARD_CHECK(layer || input_only || weight_only || op.kind == OpKind::kRMSNormBackward,
                  op_where(op) + "is not a norm backward op");
  check_arity(op, layer ? 5 : weight_only ? 3 : 4, layer ? 3 : input_only || weight_only ? 1 : 2);
  NormBackwardLayout l;
  l.weight = layer ? 4 : 3;
  const TensorMeta &g = op.inputs[0].meta, &x = op.inputs[1].meta;
  // The weight-only part reads no w: its gradient has w's size.
  norm_rows(op, x, weight_only ? op.outputs[0].meta : op.inputs[l.weight].meta, &l.rows, &l.dim);
  for (size_t i = 2; i < (layer ? 4u : 3u); ++i) check_stat(op, op.inputs[i].meta, l.rows, false);
  bool ok = g.numel() == x.numel() && (weight_only || op.outputs[0].meta.numel() == x.numel());
  for (size_t i = weight_only ? 0 : 1; i < op.outputs.size(); ++i)
    ok = ok && op.outputs[i].meta.numel() == l.dim;
  FULLSHARD_CHECK(ok, op_where(op) + (layer ? "gradient sizes do not match x / w / b"
                                            : "gradient sizes do not match x / w"));
  return l;
}

CompiledNormBackwardArgs CompiledNormBackwardArgs::decode(const OpCall& op) {
  FULLSHARD_CHECK(op.iargs.size() == 2, op_where(op) + "needs iargs {has_a, has_g_h}");
  CompiledNormBackwardArgs b;
  b.has_a = op.iargs[0] != 0;
  b.has_g_h = op.iargs[1] != 0;
  check_arity(op, 4 + (b.has_a ? 1 : 0) + (b.has_g_h ? 1 : 0), 2);
  b.a = 4;
  b.g_h = b.has_a ? 5 : 4;
  const TensorMeta &g = op.inputs[0].meta, &x = op.inputs[1].meta;
  norm_rows(op, x, op.inputs[3].meta, &b.rows, &b.dim);
  check_stat(op, op.inputs[2].meta, b.rows, true);
  FULLSHARD_CHECK(g.numel() == x.numel() && op.outputs[0].meta.numel() == x.numel() &&
                      op.outputs[1].meta.numel() == b.dim,
                  op_where(op) + "gradient sizes do not match x / w");
  // a and g_h are read a row at a time: the whole tensors are x's size.
  auto expect_x_size = [&](size_t i, const char* what) {
    const int64_t n = op.inputs[i].meta.numel();
    FULLSHARD_CHECK(n == x.numel(), op_where(op) + what + " has " + std::to_string(n) +
                                        " elements, expected " + std::to_string(x.numel()));
  };
  if (b.has_a) expect_x_size(b.a, "a");
  if (b.has_g_h) expect_x_size(b.g_h, "g_h");
  return b;
}

}  // namespace fullshard
