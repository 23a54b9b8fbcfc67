#include "core/fsdp/reduce_policy.h"

#include <cmath>

#include "core/common/error.h"

namespace fullshard {

DivideFactors gradient_divide_factors(int shard_size, int replicate_size, DType reduce_dtype,
                                      const GradientDivideOptions& o) {
  FULLSHARD_CHECK(shard_size >= 1 && replicate_size >= 0, "bad data parallel group sizes");
  FULLSHARD_CHECK(!o.factor || *o.factor > 0, "the gradient divide factor must be > 0");
  const int n = shard_size * (replicate_size > 0 ? replicate_size : 1);
  DivideFactors f;
  const bool overflow_risk = reduce_dtype != DType::kFloat32 && reduce_dtype != DType::kBFloat16;
  if (!overflow_risk && !o.force_sum_reduction_for_comms) {
    if (!o.factor) {
      f.reduce_scatter_op = f.all_reduce_op = n == 1 ? ReduceOp::kSum : ReduceOp::kAvg;
      return f;
    }
    f.all_reduce_op = ReduceOp::kSum;
    if (*o.factor == static_cast<double>(shard_size)) {
      f.reduce_scatter_op = ReduceOp::kAvg;
    } else {
      f.reduce_scatter_op = ReduceOp::kPremulSum;
      f.reduce_scatter_scale = 1.0 / *o.factor;
    }
    return f;
  }
  f.reduce_scatter_op = f.all_reduce_op = ReduceOp::kSum;
  const double factor = o.factor ? *o.factor : static_cast<double>(n);
  if (overflow_risk) {
    double pre = 1;
    while (std::fmod(factor, pre) == 0 && factor / pre > pre) pre *= 2;
    f.pre = pre;
    f.post = factor / pre;
  } else {
    f.post = factor;
  }
  return f;
}

}  // namespace fullshard
