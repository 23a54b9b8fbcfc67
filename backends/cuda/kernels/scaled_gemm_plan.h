#pragma once
// Host-side planning of torch._scaled_mm on cuBLASLt (the float8 linears' kScaledMM*,
// docs/float8.md): plain C++, testable without a GPU (tests/gpu/scaled_gemm_plan_test.cc).
#include <cstddef>
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard::cuda::plan {

// NOTE [Float8 GEMMs in cuBLASLt]: on sm_89 / sm_90 cuBLASLt runs float8 operands only in the
// "TN" format: column-major C (m x n, ldc m) = op_T(A) (m x k) * B (k x n), A and B both stored
// with k contiguous (lda = ldb = k), so in row-major terms Y[r, c] = sum_l P[r, l] Q[c, l] with
// P = B [n, k] and Q = A [m, k]. Each kind's float8 operands are staged to that layout, a
// transpose being a byte copy into caller scratch (as torch._scaled_mm needs mat2
// column-major and torchao transposes the float8 data for the grads):
//   kScaledMM               y [M,N]  = x [M,K] w[N,K]^T  A = w,          B = x,          k = K
//   kScaledMMBackwardInput  gx[M,K]  = g [M,N] w[N,K]    A = w^T [K,N],  B = g,          k = N
//   kScaledMMBackwardWeight gw[N,K]  = g^T    x          A = x^T [K,M],  B = g^T [N,M],  k = M
// The scales are torchao's (multiply to quantise); cuBLASLt's A / B scale pointers multiply the
// product, so a kernel writes their reciprocals (1 / scale, fp32) into the scratch first:
// D = (1/s_a)(1/s_b) sum_l a_l b_l, accumulated in fp32. Only tensorwise scales (one value per
// operand): the rowwise recipes need cuBLASLt's outer-vector scale mode (not built). cuBLASLt
// refuses e5m2 x e5m2, and torch._scaled_mm asks every dim to be a multiple of 16. Fast
// accumulation as torchao's Float8LinearConfig: on for the output, off for both grads.
struct ScaledGemmPlan {
  int64_t m = 0, n = 0, k = 0, ldc = 0;  // lda = ldb = k
  size_t a_in = 0, b_in = 0;             // input indices of A's and B's float8 data (scale: + 2)
  bool transpose_a = false, transpose_b = false;           // staged as the transpose of the input
  int64_t a_rows = 0, a_cols = 0, b_rows = 0, b_cols = 0;  // the inputs, row-major
  DType a_type = DType::kFloat8E4M3FN, b_type = DType::kFloat8E4M3FN, out_type = DType::kFloat32;
  bool fast_accum = false;
  // Caller scratch (bytes, each part 256-aligned): [inverse scales a, b][A^T if staged][B^T if
  // staged].
  size_t scale_offset = 0, a_offset = 0, b_offset = 0, scratch_bytes = 0;
};

// Throws InternalError naming the op on a layout cuBLASLt cannot run (see the NOTE).
ScaledGemmPlan plan_scaled_gemm(const OpCall& op);

// What the device computes from a plan, on the host: `a` / `b` are the inputs' float8 codes as
// the op receives them (row-major), `sa` / `sb` their scales; c is the column-major result
// (m x n, ldc) in double before rounding to out_type. Used by the tests against the CPU kernels.
void reference_scaled_gemm(const ScaledGemmPlan& p, const uint8_t* a, const uint8_t* b, float sa,
                           float sb, double* c);

// Row-major [rows, cols] bytes to their transpose [cols, rows] (what the staging kernel does).
void transpose_bytes_host(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

}  // namespace fullshard::cuda::plan
