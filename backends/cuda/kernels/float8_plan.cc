// The float8 casts' operand checks and launch shapes (NOTE [Float8 casts on the GPU] in
// float8_plan.h), in the order of the CPU kernel's checks (backends/cpu/kernels/float8.cc).
#include "backends/cuda/kernels/float8_plan.h"

#include <algorithm>
#include <string>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {

namespace {

using plan::where;

void expect_dtype(const OpCall& op, bool ok, const char* what, DType got, const char* want) {
  FULLSHARD_CHECK(ok,
                  where(op) + what + " must be " + want + ", got " + std::string(dtype_name(got)));
}
void expect_float(const OpCall& op, const TensorMeta& m, const char* what) {
  expect_dtype(op, plan::is_float(m.dtype), what, m.dtype, "fp32, bf16 or fp16");
}
void expect_fp32(const OpCall& op, const TensorMeta& m, const char* what) {
  expect_dtype(op, m.dtype == DType::kFloat32, what, m.dtype, "fp32");
}

}  // namespace

Float8CastPlan plan_float8_cast(const OpCall& op) {
  Float8CastPlan p;
  p.a = Float8CastArgs::decode(op);  // arity, args, sizes (core/runtime/float8_args.cc)
  const Float8CastArgs& a = p.a;
  p.n = a.rows * a.cols;
  p.scale_numel = a.scale_numel();
  p.target = static_cast<int>(a.target);
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& y = op.outputs[0].meta;
  p.x_dtype = plan::dcode(x.dtype);
  p.out_dtype = plan::dcode(y.dtype);
  switch (op.kind) {
    case OpKind::kFloat8Abs:
      expect_float(op, x, "x");
      expect_float(op, y, "|x|");
      break;
    case OpKind::kFloat8Amax:
      expect_float(op, x, "x");
      expect_float(op, y, "amax");
      p.zero_output_first = a.granularity == 0 || a.axis == 0;
      if (a.granularity == 1 && a.axis == 0) {
        // Blocks of 256 columns by a chunk of rows; grid.y (the chunks) stays under 65536.
        const int64_t chunks = std::clamp<int64_t>((a.rows + 127) / 128, 1, 65535);
        p.column_rows_per_block = std::max<int64_t>(1, (a.rows + chunks - 1) / chunks);
      }
      break;
    case OpKind::kFloat8Scale:
      expect_fp32(op, y, "scale");
      expect_float(op, x, "amax");
      p.scale_in_dtype = p.x_dtype;
      break;
    case OpKind::kFloat8Cast: {
      const size_t want_in = a.step == 0 || a.step == 2 ? 2 : 1;
      const size_t want_out = a.step == 0 ? 2 : 1;
      plan::expect_arity(op, want_in, want_out);
      switch (a.step) {
        case 0:
          expect_float(op, x, "x");
          expect_float(op, op.inputs[1].meta, "amax");
          expect_fp32(op, op.outputs[1].meta, "scale");
          break;
        case 1:
          expect_float(op, x, "x");
          expect_float(op, y, "x.to(float32)");
          break;
        case 2:
          expect_fp32(op, x, "x");
          expect_fp32(op, op.inputs[1].meta, "scale");
          expect_fp32(op, y, "x * scale");
          break;
        case 3:
          expect_fp32(op, x, "x");
          expect_fp32(op, y, "clamp");
          break;
        case 4: expect_fp32(op, x, "x"); break;
        default: FULLSHARD_CHECK(false, where(op) + "has an unknown cast step");
      }
      if (a.step == 0 || a.step == 4)
        FULLSHARD_CHECK(y.dtype == a.target_dtype(),
                        where(op) + "casts to another format than its args");
      break;
    }
    default: FULLSHARD_CHECK(false, where(op) + "is not a float8 cast kind");
  }
  return p;
}

}  // namespace fullshard::cuda
