// torch._scaled_mm's cuBLASLt layout (NOTE [Float8 GEMMs in cuBLASLt] in scaled_gemm_plan.h).
#include "backends/cuda/kernels/scaled_gemm_plan.h"

#include <string>
#include <vector>

#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/float8_args.h"
#include "core/tensor/float8.h"

namespace fullshard::cuda::plan {

namespace {

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

ScaledGemmPlan plan_scaled_gemm(const OpCall& op) {
  const ScaledMmArgs a = ScaledMmArgs::decode(op);  // arity, float8 operands, sizes
  const int64_t M = a.m, K = a.k, N = a.n;
  ScaledGemmPlan p;
  switch (op.kind) {
    case OpKind::kScaledMM:  // A = w [N, K], B = x [M, K]
      p.m = N, p.n = M, p.k = K, p.ldc = N;
      p.a_in = 1, p.b_in = 0;
      p.a_rows = N, p.a_cols = K, p.b_rows = M, p.b_cols = K;
      p.fast_accum = true;
      break;
    case OpKind::kScaledMMBackwardInput:  // A = w^T [K, N] of w [N, K], B = g [M, N]
      p.m = K, p.n = M, p.k = N, p.ldc = K;
      p.a_in = 1, p.b_in = 0;
      p.transpose_a = true;
      p.a_rows = N, p.a_cols = K, p.b_rows = M, p.b_cols = N;
      break;
    case OpKind::kScaledMMBackwardWeight:  // A = x^T [K, M] of x [M, K], B = g^T [N, M] of g
      p.m = K, p.n = N, p.k = M, p.ldc = K;
      p.a_in = 1, p.b_in = 0;
      p.transpose_a = p.transpose_b = true;
      p.a_rows = M, p.a_cols = K, p.b_rows = M, p.b_cols = N;
      break;
    default: FULLSHARD_CHECK(false, where(op) + "is not a scaled matmul");
  }
  p.a_type = op.inputs[p.a_in].meta.dtype;
  p.b_type = op.inputs[p.b_in].meta.dtype;
  p.out_type = op.outputs[0].meta.dtype;
  FULLSHARD_CHECK(!(p.a_type == DType::kFloat8E5M2 && p.b_type == DType::kFloat8E5M2),
                  where(op) + "cuBLASLt has no e5m2 x e5m2 float8 GEMM");
  FULLSHARD_CHECK(p.out_type == DType::kBFloat16 || p.out_type == DType::kFloat16 ||
                      p.out_type == DType::kFloat32,
                  where(op) + "writes " + std::string(dtype_name(p.out_type)) +
                      "; the float8 GEMM writes bf16, fp16 or fp32");
  FULLSHARD_CHECK(M % 16 == 0 && K % 16 == 0 && N % 16 == 0,
                  where(op) + "has M, K, N = " + std::to_string(M) + ", " + std::to_string(K) +
                      ", " + std::to_string(N) +
                      "; torch._scaled_mm and cuBLASLt's float8 GEMM need multiples of 16");
  for (size_t s : {p.a_in + 2, p.b_in + 2})
    FULLSHARD_CHECK(op.inputs[s].meta.dtype == DType::kFloat32 && op.inputs[s].meta.numel() == 1,
                    where(op) +
                        "has a per-row or per-column scale; the cuBLASLt float8 GEMM runs "
                        "tensorwise scales only (outer-vector scaling is not built)");
  p.scale_offset = 0;
  size_t off = round_up(2 * sizeof(float));
  if (p.transpose_a) {
    p.a_offset = off;
    off += round_up(static_cast<size_t>(p.a_rows * p.a_cols));
  }
  if (p.transpose_b) {
    p.b_offset = off;
    off += round_up(static_cast<size_t>(p.b_rows * p.b_cols));
  }
  p.scratch_bytes = off;
  return p;
}

void transpose_bytes_host(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

void reference_scaled_gemm(const ScaledGemmPlan& p, const uint8_t* a, const uint8_t* b, float sa,
                           float sb, double* c) {
  std::vector<uint8_t> at, bt;
  if (p.transpose_a) {
    at.resize(static_cast<size_t>(p.a_rows * p.a_cols));
    transpose_bytes_host(a, p.a_rows, p.a_cols, at.data());
    a = at.data();
  }
  if (p.transpose_b) {
    bt.resize(static_cast<size_t>(p.b_rows * p.b_cols));
    transpose_bytes_host(b, p.b_rows, p.b_cols, bt.data());
    b = bt.data();
  }
  const Float8Format& fa = p.a_type == DType::kFloat8E5M2 ? kFloat8E5M2 : kFloat8E4M3FN;
  const Float8Format& fb = p.b_type == DType::kFloat8E5M2 ? kFloat8E5M2 : kFloat8E4M3FN;
  const double inv = (1.0 / static_cast<double>(sa)) * (1.0 / static_cast<double>(sb));
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double acc = 0.0;  // op_T(A)[i, l] = A[l + i * k]; B[l, j] = B[l + j * k]
      for (int64_t l = 0; l < p.k; ++l)
        acc += static_cast<double>(float8_to_float(a[l + i * p.k], fa)) *
               static_cast<double>(float8_to_float(b[l + j * p.k], fb));
      c[i + j * p.ldc] = acc * inv;
    }
}

}  // namespace fullshard::cuda::plan
