// launch_float8: torchao's float8 kinds on the CUDA backend (docs/float8.md). The casts decode
// their typed arguments and operands (float8_plan.h), then one launcher of float8.cu; the
// scaled matmuls run cuBLASLt's float8 GEMM (scaled_gemm.h) in the device's staging memory
// (NOTE [Float8 GEMM staging] in backends/cuda/float8_staging.h). Everything is checked before
// anything is enqueued.
#include <string>

#include "backends/cuda/kernels/float8_launch.h"
#include "backends/cuda/kernels/float8_plan.h"
#include "backends/cuda/kernels/plan.h"
#include "backends/cuda/kernels/scaled_gemm.h"
#include "core/common/error.h"

namespace fullshard::cuda {

void launch_float8(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                   const KernelContext& ctx) {
  const cudaStream_t s = ctx.stream;
  switch (op.kind) {
    case OpKind::kScaledMM:
    case OpKind::kScaledMMBackwardInput:
    case OpKind::kScaledMMBackwardWeight:
      return launch_scaled_gemm(op, in, out, ctx, ctx.float8_staging, ctx.float8_staging_bytes);
    default: break;
  }
  const Float8CastPlan p = plan_float8_cast(op);
  const Float8CastArgs& a = p.a;
  switch (op.kind) {
    case OpKind::kFloat8Abs:
      return launch::float8_abs(in[0], p.x_dtype, out[0], p.out_dtype, p.n, s);
    case OpKind::kFloat8Amax:
      return launch::float8_amax(in[0], p.x_dtype, a.rows, a.cols, a.granularity, a.axis,
                                 p.column_rows_per_block, out[0], p.out_dtype, s);
    case OpKind::kFloat8Scale:
      if (a.step > 1) {  // the finished scale, in place (NOTE [Float8 on the CPU])
        FULLSHARD_CHECK(in[0] == out[0], plan::where(op) + "expects its later steps in place");
        return;
      }
      return launch::float8_scale(in[0], p.scale_in_dtype, static_cast<float*>(out[0]),
                                  p.scale_numel, p.target, a.pow2 != 0, s);
    case OpKind::kFloat8Cast:
      if (a.step == 0)
        return launch::float8_cast_compiled(
            in[0], p.x_dtype, in[1], plan::dcode(op.inputs[1].meta.dtype),
            static_cast<uint8_t*>(out[0]), static_cast<float*>(out[1]), a.rows, a.cols,
            a.granularity, a.axis, p.scale_numel, p.target, a.pow2 != 0, s);
      return launch::float8_cast_step(static_cast<int>(a.step), in[0], p.x_dtype,
                                      a.step == 2 ? static_cast<const float*>(in[1]) : nullptr,
                                      out[0], p.out_dtype, a.rows, a.cols, a.granularity, a.axis,
                                      p.target, s);
    default: break;
  }
  FULLSHARD_CHECK(false, plan::where(op) + "is not a float8 kind");
}

}  // namespace fullshard::cuda
