#pragma once
// torch._scaled_mm through cuBLASLt's float8 GEMM (NOTE [Float8 GEMMs in cuBLASLt] in
// scaled_gemm_plan.h): sm_89 / sm_90, tensorwise scales. Dispatched by launch_float8
// (float8_dispatch.cc) in the device's staging memory (backends/cuda/float8_staging.h).
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"

namespace fullshard::cuda {

// Enqueues kScaledMM / kScaledMMBackwardInput / kScaledMMBackwardWeight on ctx.stream: the
// reciprocal scales and any transposed operand into `scratch` (plan_scaled_gemm(op).
// scratch_bytes, 256-byte aligned, the caller's: NOTE [No kernel allocations]), then
// cublasLtMatmul with the A / B scale pointers. Throws InternalError naming the op on a layout
// it cannot run or when cuBLASLt finds no algorithm, before the GEMM is enqueued.
// The cuBLASLt descriptors of one plan (host objects: built and read without a GPU), destroyed
// with this object.
struct ScaledGemmDescriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ScaledGemmDescriptors() = default;
  ScaledGemmDescriptors(const ScaledGemmDescriptors&) = delete;
  ScaledGemmDescriptors& operator=(const ScaledGemmDescriptors&) = delete;
  ~ScaledGemmDescriptors();
};
// Describes plan `p` of `op`: TN, fp32 compute and scale type, the A / B scale pointers
// (`inv_a`, `inv_b`: device addresses of the reciprocal scales), fast accumulation, the float8
// and output layouts and the workspace preference. Throws InternalError naming the op when
// cuBLASLt refuses one.
void describe_scaled_gemm(const OpCall& op, const plan::ScaledGemmPlan& p, const float* inv_a,
                          const float* inv_b, uint64_t workspace_bytes, ScaledGemmDescriptors& d);

void launch_scaled_gemm(const OpCall& op, const std::vector<void*>& in,
                        const std::vector<void*>& out, const KernelContext& ctx, void* scratch,
                        size_t scratch_bytes);

}  // namespace fullshard::cuda
