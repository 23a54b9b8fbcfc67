#include "core/runtime/float8_args.h"

#include <string>

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
  // Operand dtypes, checked here once for every backend: "float" is fp32, bf16 or fp16.
  auto dtype_of = [&](const TensorMeta& m, const char* what, bool fp32_only) {
    const bool ok = m.dtype == DType::kFloat32 ||
                    (!fp32_only && (m.dtype == DType::kBFloat16 || m.dtype == DType::kFloat16));
    FULLSHARD_CHECK(ok, op_where(op) + what + " must be " +
                            (fp32_only ? "fp32" : "fp32, bf16 or fp16") + ", got " +
                            std::string(dtype_name(m.dtype)));
  };
  switch (op.kind) {
    case OpKind::kFloat8Abs:
      want(x.numel() == n && y.numel() == n, "expects x and |x| alike");
      dtype_of(x, "x", false);
      dtype_of(y, "|x|", false);
      break;
    case OpKind::kFloat8Amax:
      want(x.numel() == n && y.numel() == s, "expects x -> amax");
      dtype_of(x, "x", false);
      dtype_of(y, "amax", false);
      break;
    case OpKind::kFloat8Scale:
      want(x.numel() == s && y.numel() == s, "expects amax -> scale");
      dtype_of(y, "scale", true);
      dtype_of(x, "amax", false);
      break;
    case OpKind::kFloat8Cast: {
      // Steps: 0 the compiled kernel (x, amax) -> (x8, scale); eager 1 x.to(float32),
      // 2 * scale, 3 clamp, 4 .to(float8).
      want(a.step <= 4, "has an unknown cast step");
      const size_t n_in = a.step == 0 || a.step == 2 ? 2 : 1, n_out = a.step == 0 ? 2 : 1;
      FULLSHARD_CHECK(op.inputs.size() == n_in && op.outputs.size() == n_out,
                      op_where(op) + "expected " + std::to_string(n_in) + " inputs and " +
                          std::to_string(n_out) + " outputs, got " +
                          std::to_string(op.inputs.size()) + " and " +
                          std::to_string(op.outputs.size()));
      want(x.numel() == n && y.numel() == n, "expects x -> x cast");
      want(n_in == 1 || op.inputs[1].meta.numel() == s, "expects scale of the axis");
      want(n_out == 1 || op.outputs[1].meta.numel() == s,
           "expects (x8, scale) out of the compiled kernel");
      switch (a.step) {
        case 0:
          dtype_of(x, "x", false);
          dtype_of(op.inputs[1].meta, "amax", false);
          dtype_of(op.outputs[1].meta, "scale", true);
          break;
        case 1:
          dtype_of(x, "x", false);
          dtype_of(y, "x.to(float32)", false);
          break;
        case 2:
          dtype_of(x, "x", true);
          dtype_of(op.inputs[1].meta, "scale", true);
          dtype_of(y, "x * scale", true);
          break;
        case 3:
          dtype_of(x, "x", true);
          dtype_of(y, "clamp", true);
          break;
        default: dtype_of(x, "x", true); break;
      }
      want(a.step != 0 && a.step != 4 ? true : y.dtype == a.target_dtype(),
           "casts to another format than its args");
      break;
    }
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
  // Scales (inputs 2 and 3): fp32, one value or one per row / column along the output's dims.
  const int64_t along[2] = {op.kind == OpKind::kScaledMMBackwardWeight ? a.n : a.m,
                            op.kind == OpKind::kScaledMM ? a.n : a.k};
  for (size_t i = 0; i < 2; ++i) {
    const TensorMeta& s = op.inputs[i + 2].meta;
    FULLSHARD_CHECK(s.dtype == DType::kFloat32 && (s.numel() == 1 || s.numel() == along[i]),
                    op_where(op) + "has a scale of " + std::to_string(s.numel()) + " " +
                        std::string(dtype_name(s.dtype)) +
                        " elements, neither tensorwise nor along the output's dims");
  }
  return a;
}

}  // namespace fullshard
