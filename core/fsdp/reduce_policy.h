#pragma once
// Pure policy functions of FSDP2: gradient divide factors and reshard_after_forward.
#include <optional>

#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace fullshard {

// NOTE [Gradient divide factors]: as _fsdp_collectives.py's _get_gradient_divide_factors (newer
// PyTorch): with N = shard size x replicate size,
//  - fp32/bf16 reduce dtype: ReduceOp.AVG on both RS and AR (SUM when N == 1), no explicit
//    divides;
//  - other dtypes (fp16, overflow risk): SUM, dividing by `pre` before the collective and by
//    `post` after, where pre is the smallest power of two p with N % p == 0 and N/p <= p.
//    N=8 -> 4/2, N=16 -> 4/4, N=2 -> 2/1.
struct DivideFactors {
  ReduceOp op = ReduceOp::kAvg;  // used for the reduce-scatter and the HSDP all-reduce
  double pre = 1.0;              // divide the RS input by this before the collective
  double post = 1.0;             // divide the reduced output by this after
  // With a set factor: the all-reduce's op (SUM) and the reduce-scatter's premul scale.
  ReduceOp all_reduce_op = ReduceOp::kAvg;
  double scale = 1.0;  // op kPremulSum: 1 / factor
};
DivideFactors gradient_divide_factors(int data_parallel_size, DType reduce_dtype);
// With set_gradient_divide_factor(factor) (_get_gradient_divide_factors' `factor` branch): for
// fp32 / bf16 the reduce-scatter is AVG when factor equals its group's size, else
// PREMUL_SUM(1 / factor), and the all-reduce SUM; other dtypes SUM both, dividing by `pre`
// before and `factor / pre` after.
DivideFactors gradient_divide_factors(int factor, int reduce_scatter_size, DType reduce_dtype);

}  // namespace fullshard
