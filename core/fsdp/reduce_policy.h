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
};
DivideFactors gradient_divide_factors(int data_parallel_size, DType reduce_dtype);

}  // namespace fullshard
