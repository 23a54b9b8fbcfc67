#include "core/fsdp/reduce_policy.h"

#include "core/common/error.h"

namespace fullshard {

DivideFactors gradient_divide_factors(int n, DType reduce_dtype) {
  FULLSHARD_CHECK(n >= 1, "data parallel size must be >= 1");
  DivideFactors f;
  bool overflow_risk = reduce_dtype != DType::kFloat32 && reduce_dtype != DType::kBFloat16;
  if (!overflow_risk) {
    f.op = n == 1 ? ReduceOp::kSum : ReduceOp::kAvg;
    f.all_reduce_op = f.op;
    return f;
  }
  f.op = ReduceOp::kSum;
  f.all_reduce_op = ReduceOp::kSum;
  int pre = 1;
  while (n % pre == 0 && n / pre > pre) pre *= 2;
  f.pre = pre;
  f.post = static_cast<double>(n) / pre;
  return f;
}

DivideFactors gradient_divide_factors(int factor, int rs_size, DType reduce_dtype) {
  FULLSHARD_CHECK(factor >= 1 && rs_size >= 1, "gradient divide factor must be >= 1");
  const bool overflow_risk = reduce_dtype != DType::kFloat32 && reduce_dtype != DType::kBFloat16;
  if (overflow_risk) return gradient_divide_factors(factor, reduce_dtype);
  DivideFactors f;
  f.all_reduce_op = ReduceOp::kSum;
  if (factor == rs_size) {
    f.op = ReduceOp::kAvg;
  } else {
    f.op = ReduceOp::kPremulSum;
    f.scale = 1.0 / factor;
  }
  return f;
}

}  // namespace fullshard
