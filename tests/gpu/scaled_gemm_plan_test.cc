// The cuBLASLt float8 GEMM's layouts (NOTE [Float8 GEMMs in cuBLASLt], backends/cuda/kernels/
// scaled_gemm_plan.h) on the host, no GPU: what cuBLASLt computes from each kind's plan (TN,
// staged transposes, reciprocal scales) equals the CPU's torchao emulation to the bit on
// operands whose fp32 sums are exact, and the layouts cuBLASLt cannot run are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/scaled_gemm.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"
#include "core/common/error.h"
#include "core/runtime/float8_args.h"
#include "core/tensor/float8.h"

namespace fullshard::cuda::plan {
namespace {

TensorRef ref(DType d, Shape s) {
  TensorRef r;
  r.meta = {d, std::move(s)};
  return r;
}

OpCall scaled_op(OpKind k, int64_t M, int64_t K, int64_t N, DType pa = DType::kFloat8E4M3FN,
                 DType pb = DType::kFloat8E4M3FN, int64_t sa = 1, int64_t sb = 1,
                 DType out = DType::kFloat32) {
  OpCall op;
  op.kind = k;
  op.name = "t";
  Shape as{M, K}, bs{N, K}, ys{M, N};
  if (k == OpKind::kScaledMMBackwardInput) {
    as = {M, N};
    ys = {M, K};
  } else if (k == OpKind::kScaledMMBackwardWeight) {
    as = {M, N};
    bs = {M, K};
    ys = {N, K};
  }
  op.inputs = {ref(pa, as), ref(pb, bs), ref(DType::kFloat32, {sa}), ref(DType::kFloat32, {sb})};
  op.outputs = {ref(out, ys)};
  ScaledMmArgs{M, K, N}.encode(op);
  return op;
}

// Codes of magnitude 2^-3..2^3 and power-of-two scales: every fp32 sum of K <= 64 products is
// exact, so the order of accumulation (cuBLASLt's or OpenBLAS's) cannot change a bit.
std::vector<uint8_t> codes(std::mt19937& rng, int64_t n, const Float8Format& f) {
  std::uniform_real_distribution<float> u(0.125f, 7.9f);
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (auto& x : c) x = float_to_float8((rng() & 1 ? -1.0f : 1.0f) * u(rng), f, true);
  return c;
}

TEST(ScaledGemmPlan, EachKindComputesTheCpuEmulationsProduct) {
  std::mt19937 rng(20261128);
  const int64_t M = 32, K = 48, N = 16;
  for (OpKind k :
       {OpKind::kScaledMM, OpKind::kScaledMMBackwardInput, OpKind::kScaledMMBackwardWeight}) {
    SCOPED_TRACE(op_kind_name(k));
    const DType pa = k == OpKind::kScaledMM ? DType::kFloat8E4M3FN : DType::kFloat8E5M2;
    OpCall op = scaled_op(k, M, K, N, pa);
    const ScaledGemmPlan p = plan_scaled_gemm(op);
    EXPECT_EQ(p.fast_accum, k == OpKind::kScaledMM);
    EXPECT_EQ(p.m * p.n, op.outputs[0].meta.numel());
    auto a = codes(rng, op.inputs[0].meta.numel(),
                   pa == DType::kFloat8E5M2 ? kFloat8E5M2 : kFloat8E4M3FN);
    auto b = codes(rng, op.inputs[1].meta.numel(), kFloat8E4M3FN);
    float sa = 4.0f, sb = 0.5f;
    std::vector<float> y(static_cast<size_t>(op.outputs[0].meta.numel()));
    cpu::run_kernel(op, {a.data(), b.data(), &sa, &sb}, {y.data()});
    std::vector<double> c(y.size());
    const std::vector<uint8_t>& ain = p.a_in == 0 ? a : b;
    const std::vector<uint8_t>& bin = p.b_in == 0 ? a : b;
    reference_scaled_gemm(p, ain.data(), bin.data(), p.a_in == 0 ? sa : sb, p.b_in == 0 ? sa : sb,
                          c.data());
    // Column-major C (m x n, ldc m) is the row-major output.
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(static_cast<float>(c[i]), y[i]) << i;
  }
}

TEST(ScaledGemmPlan, ScratchHoldsTheScalesAndEachStagedTranspose) {
  const ScaledGemmPlan f = plan_scaled_gemm(scaled_op(OpKind::kScaledMM, 32, 48, 16));
  EXPECT_FALSE(f.transpose_a || f.transpose_b);
  EXPECT_EQ(f.scratch_bytes, 256u);
  const ScaledGemmPlan w =
      plan_scaled_gemm(scaled_op(OpKind::kScaledMMBackwardWeight, 32, 48, 16, DType::kFloat8E5M2));
  EXPECT_TRUE(w.transpose_a && w.transpose_b);
  EXPECT_EQ(w.a_offset, 256u);
  EXPECT_EQ(w.b_offset, 256u + 1536u);  // the inverse scales, x^T (32 x 48 bytes), then g^T
  EXPECT_EQ(w.scratch_bytes, w.b_offset + 512);
  EXPECT_EQ(w.a_offset % 256, 0u);
  EXPECT_EQ(w.b_offset % 256, 0u);
}

TEST(ScaledGemmPlan, RefusesWhatCublasLtCannotRunNamingTheOp) {
  auto refused = [](const OpCall& op, const char* part) {
    try {
      plan_scaled_gemm(op);
      ADD_FAILURE() << "not refused: " << part;
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'t'"), std::string::npos) << e.what();
    }
  };
  refused(
      scaled_op(OpKind::kScaledMM, 32, 48, 16, DType::kFloat8E4M3FN, DType::kFloat8E4M3FN, 32, 16),
      "tensorwise scales only");
  refused(
      scaled_op(OpKind::kScaledMMBackwardInput, 32, 48, 16, DType::kFloat8E5M2, DType::kFloat8E5M2),
      "e5m2 x e5m2");
  refused(scaled_op(OpKind::kScaledMM, 30, 48, 16), "multiples of 16");
}

// cuBLASLt accepts each kind's descriptors on the host (no GPU) and reads back what the plan
// says: TN, fp32 compute, the reciprocal scales' pointers, fast accumulation for the output only,
// the float8 formats and the column-major shapes.
TEST(ScaledGemmPlan, CublasLtTakesEachKindsDescriptors) {
  for (OpKind k :
       {OpKind::kScaledMM, OpKind::kScaledMMBackwardInput, OpKind::kScaledMMBackwardWeight}) {
    SCOPED_TRACE(op_kind_name(k));
    const DType pa = k == OpKind::kScaledMM ? DType::kFloat8E4M3FN : DType::kFloat8E5M2;
    const OpCall op = scaled_op(k, 32, 48, 16, pa, DType::kFloat8E4M3FN, 1, 1, DType::kBFloat16);
    const ScaledGemmPlan p = plan_scaled_gemm(op);
    float scales[2] = {0, 0};  // stands for the device addresses; never dereferenced here
    ScaledGemmDescriptors d;
    describe_scaled_gemm(op, p, &scales[0], &scales[1], 1 << 20, d);
    size_t written = 0;
    cublasOperation_t ta{}, tb{};
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta),
                                             &written),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb),
                                             &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(ta, CUBLAS_OP_T);
    EXPECT_EQ(tb, CUBLAS_OP_N);
    const float *sa = nullptr, *sb = nullptr;
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
                                             sizeof(sa), &written),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
                                             sizeof(sb), &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(sa, &scales[0]);
    EXPECT_EQ(sb, &scales[1]);
    int8_t fast = -1;
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                             sizeof(fast), &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(fast, k == OpKind::kScaledMM ? 1 : 0);
    auto layout = [&](cublasLtMatrixLayout_t l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                      int64_t ld) {
      cudaDataType_t t{};
      uint64_t r = 0, c = 0;
      int64_t lead = 0;
      ASSERT_EQ(
          cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof(t), &written),
          CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(
          cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &r, sizeof(r), &written),
          CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(
          cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof(c), &written),
          CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &lead, sizeof(lead),
                                                 &written),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(t, type);
      EXPECT_EQ(r, rows);
      EXPECT_EQ(c, cols);
      EXPECT_EQ(lead, ld);
    };
    const cudaDataType_t a_type = p.a_type == DType::kFloat8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    const cudaDataType_t b_type = p.b_type == DType::kFloat8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    layout(d.a, a_type, p.k, p.m, p.k);
    layout(d.b, b_type, p.k, p.n, p.k);
    layout(d.c, CUDA_R_16BF, p.m, p.n, p.ldc);
  }
}

}  // namespace
}  // namespace fullshard::cuda::plan
