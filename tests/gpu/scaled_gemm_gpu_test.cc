// The cuBLASLt float8 GEMM (backends/cuda/kernels/scaled_gemm.h) on a GPU of compute capability
// 8.9 or later against the CPU's torchao emulation: each kind, bf16 and fp32 out, on operands
// whose sums are exact in fp32 (codes of magnitude 2^-3..2^3, power-of-two scales), so the fp32
// output matches to the bit and bf16 to its rounding. Exits 77 (ctest: skipped) without such a
// GPU. Not yet run on one (docs/float8.md).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/scaled_gemm.h"
#include "core/runtime/float8_args.h"
#include "core/tensor/float8.h"
#include "core/tensor/float_convert.h"

namespace fullshard::cuda {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess)

TensorRef ref(DType d, Shape s) {
  TensorRef r;
  r.meta = {d, std::move(s)};
  return r;
}

TEST(ScaledGemmGpu, EachKindMatchesTheCpuEmulation) {
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  const size_t ws = 32 << 20;
  void* workspace = nullptr;
  CUDA_OK(cudaMalloc(&workspace, ws));
  std::mt19937 rng(20261128);
  const int64_t M = 32, K = 48, N = 32;  // sums of at most 48 products: exact in fp32
  for (OpKind k :
       {OpKind::kScaledMM, OpKind::kScaledMMBackwardInput, OpKind::kScaledMMBackwardWeight})
    for (DType out : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(std::string(op_kind_name(k)) + " -> " + std::string(dtype_name(out)));
      const DType pa = k == OpKind::kScaledMM ? DType::kFloat8E4M3FN : DType::kFloat8E5M2;
      Shape as{M, K}, bs{N, K}, ys{M, N};
      if (k == OpKind::kScaledMMBackwardInput) as = {M, N}, ys = {M, K};
      if (k == OpKind::kScaledMMBackwardWeight) as = {M, N}, bs = {M, K}, ys = {N, K};
      OpCall op;
      op.kind = k;
      op.name = "gpu";
      op.inputs = {ref(pa, as), ref(DType::kFloat8E4M3FN, bs), ref(DType::kFloat32, {1}),
                   ref(DType::kFloat32, {1})};
      op.outputs = {ref(out, ys)};
      ScaledMmArgs{M, K, N}.encode(op);
      std::uniform_real_distribution<float> u(0.125f, 7.9f);
      auto codes = [&](int64_t n, const Float8Format& f) {
        std::vector<uint8_t> c(static_cast<size_t>(n));
        for (auto& x : c) x = float_to_float8((rng() & 1 ? -1.0f : 1.0f) * u(rng), f, true);
        return c;
      };
      auto a =
          codes(op.inputs[0].meta.numel(), pa == DType::kFloat8E5M2 ? kFloat8E5M2 : kFloat8E4M3FN);
      auto b = codes(op.inputs[1].meta.numel(), kFloat8E4M3FN);
      float scales[2] = {8.0f, 0.25f};
      const int64_t ny = op.outputs[0].meta.numel();
      const size_t ybytes = static_cast<size_t>(ny) * dtype_size(out);
      std::vector<unsigned char> want(ybytes), got(ybytes);
      cpu::run_kernel(op, {a.data(), b.data(), &scales[0], &scales[1]}, {want.data()});
      void *da, *db, *ds, *dy, *scratch;
      CUDA_OK(cudaMalloc(&da, a.size()));
      CUDA_OK(cudaMalloc(&db, b.size()));
      CUDA_OK(cudaMalloc(&ds, sizeof(scales)));
      CUDA_OK(cudaMalloc(&dy, ybytes));
      const size_t sbytes = plan::plan_scaled_gemm(op).scratch_bytes;
      CUDA_OK(cudaMalloc(&scratch, sbytes));
      CUDA_OK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(ds, scales, sizeof(scales), cudaMemcpyHostToDevice));
      KernelContext ctx;
      ctx.lt = lt;
      ctx.gemm_workspace = workspace;
      ctx.gemm_workspace_bytes = ws;
      launch_scaled_gemm(op, {da, db, ds, static_cast<float*>(ds) + 1}, {dy}, ctx, scratch, sbytes);
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy(got.data(), dy, ybytes, cudaMemcpyDeviceToHost));
      // The grads accumulate in fp32 (no fast accumulation): to the bit. The output's fast
      // accumulation (torchao's forward) may round its partial sums: within 2^-10 relative.
      for (int64_t i = 0; i < ny; ++i) {
        auto value = [&](const std::vector<unsigned char>& v) {
          if (out == DType::kFloat32) {
            float f;
            std::memcpy(&f, v.data() + 4 * i, 4);
            return f;
          }
          uint16_t h;
          std::memcpy(&h, v.data() + 2 * i, 2);
          return bf16_to_float(h);
        };
        if (k == OpKind::kScaledMM)
          ASSERT_NEAR(value(got), value(want), 0x1p-10f * (1.0f + std::fabs(value(want)))) << i;
        else
          ASSERT_EQ(value(got), value(want)) << i;
      }
      for (void* p : {da, db, ds, dy, scratch}) cudaFree(p);
    }
  cudaFree(workspace);
  cublasLtDestroy(lt);
}

}  // namespace
}  // namespace fullshard::cuda

int main(int argc, char** argv) {
  int n = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 ||
      cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major * 10 + prop.minor < 89) {
    std::printf(
        "scaled_gemm_gpu_test: no CUDA device of compute capability 8.9 or later, "
        "skipping\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
