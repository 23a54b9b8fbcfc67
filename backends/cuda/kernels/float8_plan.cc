// The float8 casts' launch shapes (NOTE [Float8 casts on the GPU] in float8_plan.h). Every
// operand check (arity, sizes, dtypes, the target format) is Float8CastArgs::decode's, shared
// with the CPU kernels (core/runtime/float8_args.cc).
#include "backends/cuda/kernels/float8_plan.h"

#include <algorithm>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {

Float8CastPlan plan_float8_cast(const OpCall& op) {
  Float8CastPlan p;
  p.a = Float8CastArgs::decode(op);  // every check (core/runtime/float8_args.cc)
  const Float8CastArgs& a = p.a;
  p.n = a.rows * a.cols;
  p.scale_numel = a.scale_numel();
  p.target = static_cast<int>(a.target);
  const TensorMeta& x = op.inputs[0].meta;
  const TensorMeta& y = op.outputs[0].meta;
  p.x_dtype = plan::dcode(x.dtype);
  p.out_dtype = plan::dcode(y.dtype);
  switch (op.kind) {
    case OpKind::kFloat8Amax:
      p.zero_output_first = a.granularity == 0 || a.axis == 0;
      if (a.granularity == 1 && a.axis == 0) {
        // Blocks of 256 columns by a chunk of rows; grid.y (the chunks) stays under 65536.
        const int64_t chunks = std::clamp<int64_t>((a.rows + 127) / 128, 1, 65535);
        p.column_rows_per_block = std::max<int64_t>(1, (a.rows + chunks - 1) / chunks);
      }
      break;
    case OpKind::kFloat8Scale: p.scale_in_dtype = p.x_dtype; break;
    default: break;
  }
  return p;
}

}  // namespace fullshard::cuda
