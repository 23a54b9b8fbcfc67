#pragma once
// Internal to the CPU kernels: row-major fp32 GEMM through OpenBLAS, with degenerate sizes
// (any dim 0) handled here so callers need not special-case them.
#include <cblas.h>

#include <cstdint>

namespace fullshard::cpu::detail {

// C[m, n] = alpha * op(A) op(B) + beta * C, where op(A) is [m, k] and op(B) is [k, n];
// lda / ldb / ldc are the row strides of A, B, C as stored.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace fullshard::cpu::detail
