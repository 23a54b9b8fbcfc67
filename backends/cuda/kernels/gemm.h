#pragma once
// The linear ops through cuBLASLt (NOTE [Row-major GEMMs in cuBLASLt] in plan.cc), with the
// descriptors and heuristic algorithm of each shape cached (NOTE [cuBLASLt plan cache]).
#include <cstdint>
#include <vector>

#include <cublasLt.h>

#include "backends/cuda/kernels/cuda_kernels.h"

namespace fullshard::cuda {

// kLinear, kLinearBackwardInput, kLinearBackwardWeight.
void launch_gemm(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out,
                 const KernelContext& ctx);

// Shapes planned so far (tests: a repeated shape reuses its entry).
size_t gemm_cache_size();

// What the cuBLASLt heuristic is asked for (NOTE [Split-K partial sums in fp32] in gemm.cc):
// a pure function of the workspace and the operands' alignments (A, B, C/D), and the function
// that writes it into a preference descriptor (host-only: no GPU needed).
struct GemmPreference {
  uint64_t max_workspace_bytes = 0;
  uint32_t min_alignment_a = 0, min_alignment_b = 0, min_alignment_c = 0, min_alignment_d = 0;
  uint32_t reduction_scheme_mask = 0;  // cublasLtReductionScheme_t bits the algorithm may use
};
GemmPreference gemm_preference(uint64_t workspace_bytes, uint32_t align_a, uint32_t align_b,
                               uint32_t align_c);
// Sets every field of `p` on `pref`; false when cuBLASLt refuses one.
bool apply_gemm_preference(const GemmPreference& p, cublasLtMatmulPreference_t pref);

}  // namespace fullshard::cuda
