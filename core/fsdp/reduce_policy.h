#pragma once
// Pure policy functions of FSDP2: gradient divide factors and reshard_after_forward.
#include <optional>

#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace fullshard {

// NOTE [Gradient divide factors]: as _fsdp_collectives.py's _get_gradient_divide_factors (torch
// 2.11; tests/data/oracle/gradient_divide_factors.json is its output). N = shard size x replicate
// size, f = FSDPModule.set_gradient_divide_factor's factor (absent: none):
//  - fp32 / bf16 reduce dtype without set_force_sum_reduction_for_comms: no explicit divides.
//    Without f: AVG on the reduce-scatter and the all-reduce (SUM when N == 1). With f: the
//    reduce-scatter is AVG when f equals the shard size, else PREMUL_SUM(1 / f); the all-reduce
//    is SUM (torchtitan's f = 1 makes both sums).
//  - otherwise (fp16: overflow risk; or the forced sum): SUM on both, dividing by f (default N):
//    with overflow risk by `pre` before the collective and `post` = f / pre after, pre the
//    smallest power of two p with f % p != 0 or f / p <= p (N=8 -> 4/2, N=3 -> 2/1.5); a forced
//    sum without overflow risk divides by f after only.
struct DivideFactors {
  ReduceOp reduce_scatter_op = ReduceOp::kAvg;
  double reduce_scatter_scale = 1.0;        // kPremulSum's factor (1 / f)
  ReduceOp all_reduce_op = ReduceOp::kAvg;  // the HSDP replicate all-reduce
  double pre = 1.0;                         // divide the RS input by this before the collective
  double post = 1.0;                        // divide the reduced output by this after
};

// FSDPModule's two settings that change the factors.
struct GradientDivideOptions {
  std::optional<double> factor;  // set_gradient_divide_factor (> 0)
  bool force_sum_reduction_for_comms = false;
};

// `replicate_size` 0: no all-reduce group (FSDP); >= 1: HSDP's replicate group.
DivideFactors gradient_divide_factors(int shard_size, int replicate_size, DType reduce_dtype,
                                      const GradientDivideOptions& options = {});

}  // namespace fullshard
