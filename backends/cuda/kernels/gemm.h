#pragma once
// The linear ops through cuBLASLt (NOTE [Row-major GEMMs in cuBLASLt] in plan.cc), with the
// descriptors and heuristic algorithm of each shape cached (NOTE [cuBLASLt plan cache]).
#include <vector>

#include "backends/cuda/kernels/cuda_kernels.h"

namespace fullshard::cuda {

// kLinear, kLinearBackwardInput, kLinearBackwardWeight.
void launch_gemm(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                 const KernelContext& ctx);

// Shapes planned so far (tests: a repeated shape reuses its entry).
size_t gemm_cache_size();

}  // namespace fullshard::cuda
