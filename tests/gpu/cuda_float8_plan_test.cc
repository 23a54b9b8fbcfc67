// Host-only (no GPU): the CUDA backend's float8 kinds as far as the host decides them
// (backends/cuda/kernels/float8_plan.h, float8_dispatch.cc): cuda::has_kernel lists every float8
// kind; the cast plans read the typed arguments (Float8CastArgs) and the operands as the CPU
// kernel does, and refuse what it refuses; the scale index and the per-column amax's row chunks;
// the dispatcher hands the float8 GEMM its staging and refuses too little of it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "backends/common/kernel_families.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/float8_plan.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"
#include "core/common/error.h"
#include "core/runtime/float8_args.h"
#include "core/runtime/op_table.h"

namespace fullshard::cuda {
namespace {

TensorRef ref(DType d, Shape s) {
  TensorRef r;
  r.meta = {d, std::move(s)};
  return r;
}

OpCall cast_op(OpKind k, std::vector<TensorRef> in, std::vector<TensorRef> out,
               const Float8CastArgs& a) {
  OpCall op;
  op.kind = k;
  op.name = "w float8";
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  a.encode(op);
  return op;
}

std::string refusal(const OpCall& op) {
  try {
    plan_float8_cast(op);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaFloat8Plan, HasKernelListsEveryFloat8Kind) {
  int n = 0;
  for (size_t k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (!backends::is_float8_kind(kind)) continue;
    EXPECT_TRUE(cuda::has_kernel(kind)) << op_kind_name(kind);
    ++n;
  }
  EXPECT_EQ(n, 7);
}

TEST(CudaFloat8Plan, CastPlansReadTheTypedArguments) {
  const Float8CastArgs col{1, 0, 96, 40, 0, 1, 1};
  const OpCall amax = cast_op(OpKind::kFloat8Amax, {ref(DType::kBFloat16, {96, 40})},
                              {ref(DType::kBFloat16, {40})}, col);
  const Float8CastPlan p = plan_float8_cast(amax);
  EXPECT_EQ(p.n, 96 * 40);
  EXPECT_EQ(p.scale_numel, 40);
  EXPECT_EQ(p.x_dtype, kBF16);
  EXPECT_EQ(p.out_dtype, kBF16);
  EXPECT_TRUE(p.zero_output_first);
  EXPECT_EQ(p.column_rows_per_block, 96);
  EXPECT_EQ(p.target, 1);
  EXPECT_EQ(p.a.pow2, 1);

  const Float8CastArgs row{1, -1, 96, 40, 0, 0, 0};
  EXPECT_FALSE(plan_float8_cast(cast_op(OpKind::kFloat8Amax, {ref(DType::kFloat32, {96, 40})},
                                        {ref(DType::kFloat32, {96})}, row))
                   .zero_output_first);
  const Float8CastArgs tensor{0, -1, 96, 40, 0, 0, 0};
  EXPECT_TRUE(plan_float8_cast(cast_op(OpKind::kFloat8Amax, {ref(DType::kFloat32, {96, 40})},
                                       {ref(DType::kFloat32, {1})}, tensor))
                  .zero_output_first);

  // The compiled cast: (x bf16, amax fp32) -> (x8, scale).
  const OpCall compiled =
      cast_op(OpKind::kFloat8Cast, {ref(DType::kBFloat16, {96, 40}), ref(DType::kFloat32, {96})},
              {ref(DType::kFloat8E4M3FN, {96, 40}), ref(DType::kFloat32, {96})}, row);
  EXPECT_EQ(plan_float8_cast(compiled).scale_numel, 96);
  // The scale of a bf16 amax (eager: the amax keeps x's dtype).
  Float8CastArgs step1 = tensor;
  step1.step = 1;
  const OpCall scale = cast_op(OpKind::kFloat8Scale, {ref(DType::kBFloat16, {1})},
                               {ref(DType::kFloat32, {1})}, step1);
  EXPECT_EQ(plan_float8_cast(scale).scale_in_dtype, kBF16);
}

TEST(CudaFloat8Plan, RefusesWhatTheCpuKernelRefuses) {
  Float8CastArgs a{0, -1, 8, 16, 2, 0, 0};
  // Step 2 multiplies fp32 by the fp32 scale.
  EXPECT_NE(refusal(cast_op(OpKind::kFloat8Cast,
                            {ref(DType::kBFloat16, {8, 16}), ref(DType::kFloat32, {1})},
                            {ref(DType::kFloat32, {8, 16})}, a))
                .find("x must be fp32, got bf16"),
            std::string::npos);
  // Step 2 without its scale.
  EXPECT_NE(refusal(cast_op(OpKind::kFloat8Cast, {ref(DType::kFloat32, {8, 16})},
                            {ref(DType::kFloat32, {8, 16})}, a))
                .find("expected 2 inputs"),
            std::string::npos);
  // A scale that is not fp32.
  a.step = 1;
  EXPECT_NE(refusal(cast_op(OpKind::kFloat8Scale, {ref(DType::kFloat32, {1})},
                            {ref(DType::kBFloat16, {1})}, a))
                .find("scale must be fp32"),
            std::string::npos);
  // The last step into another format than the args name.
  a.step = 4;
  EXPECT_NE(refusal(cast_op(OpKind::kFloat8Cast, {ref(DType::kFloat32, {8, 16})},
                            {ref(DType::kFloat8E5M2, {8, 16})}, a))
                .find("casts to another format"),
            std::string::npos);
  // An amax of integers.
  a.step = 0;
  EXPECT_NE(refusal(cast_op(OpKind::kFloat8Amax, {ref(DType::kInt64, {8, 16})},
                            {ref(DType::kFloat32, {1})}, a))
                .find("x must be fp32, bf16 or fp16"),
            std::string::npos);
}

// Element e = i * cols + j of [rows, cols] reads scale 0, i (per row) or j (per column).
RC_GTEST_PROP(CudaFloat8Plan, ScaleIndexIsTheCpusRowOrColumn, ()) {
  const int64_t rows = *rc::gen::inRange<int64_t>(1, 5000);
  const int64_t cols = *rc::gen::inRange<int64_t>(1, 5000);
  const int64_t i = *rc::gen::inRange<int64_t>(0, rows), j = *rc::gen::inRange<int64_t>(0, cols);
  const int64_t e = i * cols + j;
  RC_ASSERT(float8_scale_index(0, -1, cols, e) == 0);
  RC_ASSERT(float8_scale_index(1, -1, cols, e) == i);
  RC_ASSERT(float8_scale_index(1, 0, cols, e) == j);
}

// The per-column amax's row chunks cover every row, at most 65535 of them (grid.y).
RC_GTEST_PROP(CudaFloat8Plan, ColumnChunksCoverEveryRow, ()) {
  const int64_t rows = *rc::gen::inRange<int64_t>(0, int64_t{1} << 31);
  const Float8CastArgs a{1, 0, rows, 1, 0, 0, 0};
  const Float8CastPlan p = plan_float8_cast(cast_op(
      OpKind::kFloat8Amax, {ref(DType::kFloat32, {rows, 1})}, {ref(DType::kFloat32, {1})}, a));
  RC_ASSERT(p.column_rows_per_block >= 1);
  const int64_t chunks = (rows + p.column_rows_per_block - 1) / p.column_rows_per_block;
  RC_ASSERT(chunks * p.column_rows_per_block >= rows);
  RC_ASSERT(chunks <= 65535);
}

// The dispatcher runs the float8 GEMM in ctx.float8_staging: too little of it is refused naming
// the bytes the plan needs, before anything touches the device.
TEST(CudaFloat8Plan, TheGemmTakesItsStagingFromTheContext) {
  OpCall op;
  op.kind = OpKind::kScaledMMBackwardWeight;
  op.name = "w grad_weight";
  const int64_t M = 64, K = 32, N = 48;
  op.inputs = {ref(DType::kFloat8E5M2, {M, N}), ref(DType::kFloat8E4M3FN, {M, K}),
               ref(DType::kFloat32, {1}), ref(DType::kFloat32, {1})};
  op.outputs = {ref(DType::kFloat32, {N, K})};
  ScaledMmArgs{M, K, N}.encode(op);
  const size_t need = plan::plan_scaled_gemm(op).scratch_bytes;
  EXPECT_EQ(need, 256u + 2048u + 3072u);  // inverse scales, x^T, g^T
  KernelContext ctx;
  ctx.lt = reinterpret_cast<cublasLtHandle_t>(uintptr_t{1} << 40);  // never used: refused first
  ctx.float8_staging = reinterpret_cast<void*>(uintptr_t{1} << 44);
  ctx.float8_staging_bytes = need - 256;
  const std::vector<void*> in = {
      reinterpret_cast<void*>(uintptr_t{1} << 32), reinterpret_cast<void*>(uintptr_t{2} << 32),
      reinterpret_cast<void*>(uintptr_t{3} << 32), reinterpret_cast<void*>(uintptr_t{4} << 32)};
  const std::vector<void*> out = {reinterpret_cast<void*>(uintptr_t{5} << 32)};
  std::string message;
  try {
    launch_kernel(op, in, out, ctx);
  } catch (const InternalError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("needs " + std::to_string(need) +
                         " bytes of 256-byte aligned scratch, got " + std::to_string(need - 256)),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace fullshard::cuda
