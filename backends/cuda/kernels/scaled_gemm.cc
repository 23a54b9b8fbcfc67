// torch._scaled_mm on cuBLASLt (NOTE [Float8 GEMMs in cuBLASLt] in scaled_gemm_plan.h).
#include "backends/cuda/kernels/scaled_gemm.h"

#include <cublasLt.h>

#include <string>

#include "backends/cuda/kernels/plan.h"
#include "backends/cuda/kernels/scaled_gemm_launch.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {

namespace {

cudaDataType_t lt_type(DType d) {
  switch (d) {
    case DType::kFloat8E4M3FN: return CUDA_R_8F_E4M3;
    case DType::kFloat8E5M2: return CUDA_R_8F_E5M2;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

void check(cublasStatus_t st, const OpCall& op, const char* what) {
  FULLSHARD_CHECK(st == CUBLAS_STATUS_SUCCESS, plan::where(op) + "cuBLASLt " + what +
                                                   " failed with status " +
                                                   std::to_string(static_cast<int>(st)));
}

}  // namespace

ScaledGemmDescriptors::~ScaledGemmDescriptors() {
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

void describe_scaled_gemm(const OpCall& op, const plan::ScaledGemmPlan& p, const float* inv_a,
                          const float* inv_b, uint64_t workspace_bytes, ScaledGemmDescriptors& d) {
  check(cublasLtMatmulDescCreate(&d.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op, "desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;  // TN: the only float8 format
  check(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), op,
        "TRANSA");
  check(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), op,
        "TRANSB");
  check(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &inv_a,
                                       sizeof(inv_a)),
        op, "A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &inv_b,
                                       sizeof(inv_b)),
        op, "B_SCALE_POINTER");
  const int8_t fast = p.fast_accum ? 1 : 0;
  check(
      cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)),
      op, "FAST_ACCUM");
  // Column-major: A is k x m (op_T gives m x k), B is k x n, C and D m x n.
  check(cublasLtMatrixLayoutCreate(&d.a, lt_type(p.a_type), p.k, p.m, p.k), op, "layout A");
  check(cublasLtMatrixLayoutCreate(&d.b, lt_type(p.b_type), p.k, p.n, p.k), op, "layout B");
  check(cublasLtMatrixLayoutCreate(&d.c, lt_type(p.out_type), p.m, p.n, p.ldc), op, "layout C");
  check(cublasLtMatmulPreferenceCreate(&d.pref), op, "preference");
  check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)),
        op, "workspace preference");
}

void launch_scaled_gemm(const OpCall& op, const std::vector<void*>& in,
                        const std::vector<void*>& out, const KernelContext& ctx, void* scratch,
                        size_t scratch_bytes) {
  const plan::ScaledGemmPlan p = plan::plan_scaled_gemm(op);
  FULLSHARD_CHECK(ctx.lt != nullptr, plan::where(op) + "no cuBLASLt handle in the kernel context");
  FULLSHARD_CHECK(
      scratch_bytes >= p.scratch_bytes && (reinterpret_cast<uintptr_t>(scratch) % 256) == 0,
      plan::where(op) + "needs " + std::to_string(p.scratch_bytes) +
          " bytes of 256-byte aligned scratch, got " + std::to_string(scratch_bytes));
  FULLSHARD_CHECK(p.a_rows / 32 < 65535 && p.b_rows / 32 < 65535,
                  plan::where(op) + "has too many rows for the staging transpose's grid");
  auto* base = static_cast<unsigned char*>(scratch);
  float* inv = reinterpret_cast<float*>(base + p.scale_offset);
  const void* a = in[p.a_in];
  const void* b = in[p.b_in];

  ScaledGemmDescriptors d;
  describe_scaled_gemm(op, p, inv, inv + 1, ctx.gemm_workspace_bytes, d);
  cublasLtMatmulHeuristicResult_t h{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.desc, d.a, d.b, d.c, d.c, d.pref, 1, &h, &found),
        op, "heuristic");
  FULLSHARD_CHECK(found > 0, plan::where(op) +
                                 "cuBLASLt has no float8 GEMM for this shape here (needs sm_89 or "
                                 "sm_90 and CUDA 12 or later)");

  // Staging, then the GEMM, all on ctx.stream.
  launch::inverse_scales(static_cast<const float*>(in[p.a_in + 2]),
                         static_cast<const float*>(in[p.b_in + 2]), inv, ctx.stream);
  if (p.transpose_a) {
    launch::transpose_bytes(a, p.a_rows, p.a_cols, base + p.a_offset, ctx.stream);
    a = base + p.a_offset;
  }
  if (p.transpose_b) {
    launch::transpose_bytes(b, p.b_rows, p.b_cols, base + p.b_offset, ctx.stream);
    b = base + p.b_offset;
  }
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(ctx.lt, d.desc, &alpha, a, d.a, b, d.b, &beta, out[0], d.c, out[0], d.c,
                       &h.algo, ctx.gemm_workspace, ctx.gemm_workspace_bytes, ctx.stream),
        op, "matmul");
}

}  // namespace fullshard::cuda
