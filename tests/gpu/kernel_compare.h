#pragma once
// The harness of the CUDA kernel tests (cuda_kernels_test.cc, cuda_kernels_eager_test.cc,
// cuda_kernels_tp_test.cc, cuda_kernels_compiled_test.cc): one OpKind run on the CPU reference
// kernels (fullshard::cpu::run_kernel) and through cuda::launch_kernel over copies of the same host
// tensors, then both sides' outputs compared with the tolerances of docs/cuda-kernels.md; and the
// tests' main(), which exits 77 (ctest: skipped) when no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"
#include "tests/unit/kernels_test_support.h"

namespace kernel_compare {

using namespace fullshard;
using kt::HT;

inline void cuda_ok(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

struct Device {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 32u << 20;
  bool use_ws = true;  // false: GEMMs get no workspace (a profile's blas_workspace_bytes 0)
  Device() {
    cudaStreamCreate(&stream);
    cublasLtCreate(&lt);
    cudaMalloc(&ws, ws_bytes);
  }
  ~Device() {
    cudaFree(ws);
    cublasLtDestroy(lt);
    cudaStreamDestroy(stream);
  }
};
inline Device& dev() {
  static Device d;
  return d;
}

// Runs op `k` on the CPU kernels and on the GPU over copies of the same tensors (an HT listed in
// both inputs and outputs is in place on both sides) and returns both sides' outputs. GPU
// outputs start as 0xFF bytes (NaN), so an element the kernel does not write shows; with
// `preset_outputs` they start as the host tensors' contents instead, as the CPU's do (for ops
// that write only part of their output: an element written on one side only shows). `misalign`
// shifts every device tensor off its allocation's 256-byte alignment, by `misalign` bytes rounded
// up to a multiple of the tensor's element size (device_shift): off the 16-byte alignment the
// vectorised paths need, so the kernels' scalar paths run, yet never inside an element, which no
// PyTorch tensor is and dispatch refuses (NOTE [Operand alignment] in dispatch.cc).
struct Both {
  std::vector<HT> cpu, gpu;
};
inline size_t device_shift(size_t misalign, DType d) {
  const size_t es = dtype_size(d);
  return (misalign + es - 1) / es * es;
}
inline Both run_both(OpKind k, const std::vector<HT*>& in, const std::vector<HT*>& out,
                     std::vector<int64_t> iargs = {}, std::vector<double> fargs = {},
                     size_t misalign = 0, bool preset_outputs = false) {
  const OpCall op = kt::make_call(k, in, out, iargs, fargs);
  std::map<HT*, HT> host;
  std::map<HT*, char*> device;
  std::vector<void*> dev_blocks;
  auto is_input = [&](HT* t) { return std::find(in.begin(), in.end(), t) != in.end(); };
  for (HT* t : in) host.emplace(t, *t);
  for (HT* t : out) host.emplace(t, *t);
  for (auto& [t, copy] : host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, t->meta.nbytes() + 64), cudaSuccess);
    dev_blocks.push_back(p);
    char* d = static_cast<char*>(p) + device_shift(misalign, t->meta.dtype);
    device[t] = d;
    if (is_input(t) || preset_outputs) {
      cudaMemcpy(d, t->data(), t->meta.nbytes(), cudaMemcpyHostToDevice);
    } else {
      cudaMemset(d, 0xff, t->meta.nbytes());
    }
  }
  std::vector<void*> ci, co, gi, go;
  for (HT* t : in) ci.push_back(host.at(t).data()), gi.push_back(device.at(t));
  for (HT* t : out) co.push_back(host.at(t).data()), go.push_back(device.at(t));
  cpu::run_kernel(op, ci, co);
  cuda::KernelContext ctx{dev().stream, dev().lt, dev().use_ws ? dev().ws : nullptr,
                          dev().use_ws ? dev().ws_bytes : 0};
  // The float8 GEMMs' staging, as the device gives it (NOTE [Float8 GEMM staging]).
  if (k == OpKind::kScaledMM || k == OpKind::kScaledMMBackwardInput ||
      k == OpKind::kScaledMMBackwardWeight) {
    ctx.float8_staging_bytes = cuda::plan::plan_scaled_gemm(op).scratch_bytes;
    EXPECT_EQ(cudaMalloc(&ctx.float8_staging, ctx.float8_staging_bytes), cudaSuccess);
    dev_blocks.push_back(ctx.float8_staging);
  }
  cuda::launch_kernel(op, gi, go, ctx);
  EXPECT_EQ(cudaStreamSynchronize(dev().stream), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Both r;
  for (HT* t : out) {
    r.cpu.push_back(host.at(t));
    HT g = *t;
    cudaMemcpy(g.data(), device.at(t), t->meta.nbytes(), cudaMemcpyDeviceToHost);
    r.gpu.push_back(std::move(g));
  }
  for (void* p : dev_blocks) cudaFree(p);
  return r;
}

inline void expect_bits(const HT& gpu, const HT& cpu, const std::string& what) {
  EXPECT_EQ(0, std::memcmp(gpu.data(), cpu.data(), cpu.meta.nbytes())) << what << ": bits differ";
}
// |gpu - cpu| <= atol + rtol |cpu|, with rtol at least `ulps` units of the output dtype's
// precision.
inline void expect_close(const HT& gpu, const HT& cpu, double atol, double rtol,
                         const std::string& what, double ulps = 1) {
  const double r = std::max(rtol, ulps * 2 * kt::rel_eps(cpu.meta.dtype));
  const std::string m = kt::mismatch(gpu.values(), cpu.values(), atol, r, what);
  EXPECT_TRUE(m.empty()) << m;
}

inline const DType kFloats[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
inline std::string name(DType d) { return kt::dtype_str(d); }

// main() of a kernel test binary: 77 (skipped) without a CUDA device, else the gtests.
inline int run_gpu_tests(int argc, char** argv, const char* binary) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    std::printf("%s: no CUDA device (%s), skipping\n", binary,
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace kernel_compare

namespace kc = kernel_compare;  // the short names the test files use
namespace ckt = kernel_compare;
