// Every GEMM the models' training steps launch, on the GPU through cuda::launch_kernel (cuBLASLt
// with the model's workspace), against an fp64 reference of sampled output elements. The GEMMs
// come from the op lists the host program emits (recorded_ops.h): tiny Llama, tiny GPT-2 (the
// GPU compare scenarios), the same with tensor parallelism, and the 1B benchmark
// (scenarios/llama-1b-h100-bench.json), each distinct layout once (kind, transposes, m / n / k,
// leading dims, dtypes, bias). Needs a GPU: exits 77 (ctest: skipped) without one.
//
// NOTE [GEMM shapes of the models]: operand t's element i is pool_t[i % P] (P = 2^20 + 7 values
// in [-1, 1], exact in the operand dtype), so any shape reads well-mixed values and the reference
// needs no copy of the operands. For each GEMM, kSamples output elements (the four corners and
// random ones) are summed on the host in fp64, with S = sum |a_l b_l| over the k products. The
// GPU accumulates in fp32 and rounds once to the output: per element it may differ by one
// rounding of the output dtype (2^-p |ref|, p = 24 / 8 / 11 for fp32 / bf16 / fp16, counted
// twice: the rounding and a flip near a tie) plus fp32 accumulation error, bounded here by
// 4 * 2^-24 * sqrt(k) * S: a random-walk bound (sqrt(k) roundings of partial sums at most S),
// with a factor 4 for the tensor cores' truncating adds. Partial sums stored in bf16 (split-K
// with a reduced-precision reduction, NOTE [Split-K partial sums in fp32] in gemm.cc) err by
// 2^-9 of a partial: at the GPU run's 257 x 129 x 65, 0.0038 where this bound is 2e-4. An
// indexing or layout error is off by the size of the result.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/plan.h"
#include "core/scenario/scenario.h"
#include "core/tensor/float_convert.h"
#include "tests/gpu/recorded_ops.h"

namespace fullshard {
namespace {

constexpr int64_t kPool = (1 << 20) + 7;
constexpr int kSamples = 512;

std::string source_root() {
  const char* env =
      std::getenv("FULLSHARD_SOURCE_DIR");  // tools/gpu-check.sh runs from another checkout
  return env && *env ? env : FULLSHARD_SOURCE_DIR;
}

// Values in [-1, 1] exactly representable in `d`, and their bytes in `d`.
struct Pool {
  std::vector<double> v;
  std::vector<unsigned char> bytes;
  Pool(DType d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const size_t es = dtype_size(d);
    v.resize(kPool);
    bytes.resize(kPool * es);
    for (int64_t i = 0; i < kPool; ++i) {
      const float f = u(rng);
      if (d == DType::kBFloat16) {
        const uint16_t h = float_to_bf16(f);
        v[i] = bf16_to_float(h);
        std::memcpy(&bytes[i * es], &h, 2);
      } else if (d == DType::kFloat16) {
        const uint16_t h = float_to_fp16(f);
        v[i] = fp16_to_float(h);
        std::memcpy(&bytes[i * es], &h, 2);
      } else {
        v[i] = f;
        std::memcpy(&bytes[i * es], &f, 4);
      }
    }
  }
};

// A device buffer whose element i (in dtype d) is pool[i % P], refilled when the dtype changes.
struct Slot {
  void* p = nullptr;
  uint64_t bytes = 0;
  int dtype = -1;
  uint32_t seed = 0;
  std::map<DType, Pool> pools;
  const Pool& fill(DType d, uint64_t need) {
    auto it = pools.find(d);
    if (it == pools.end())
      it = pools.emplace(d, Pool(d, seed * 7 + static_cast<uint32_t>(d))).first;
    if (need > bytes) {
      if (p) cudaFree(p);
      bytes = need;
      EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess) << bytes << " bytes";
      dtype = -1;
    }
    if (dtype != static_cast<int>(d)) {
      const uint64_t tile = it->second.bytes.size();
      for (uint64_t off = 0; off < bytes; off += tile)
        EXPECT_EQ(cudaMemcpy(static_cast<char*>(p) + off, it->second.bytes.data(),
                             std::min(tile, bytes - off), cudaMemcpyHostToDevice),
                  cudaSuccess);
      dtype = static_cast<int>(d);
    }
    return it->second;
  }
  ~Slot() {
    if (p) cudaFree(p);
  }
};

using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                       int, int>;

struct Gemm {
  OpCall op;
  cuda::plan::GemmPlan plan;
  std::string where;  // scenario and op name, for messages
};

// The distinct GEMM layouts of every op list, the first op of each kept.
std::map<Key, Gemm> distinct_gemms() {
  std::map<Key, Gemm> out;
  auto add = [&](const Scenario& s, const std::string& label, int rank) {
    for (const OpCall& op : recorded_ops::record(s, rank)) {
      if (op.kind != OpKind::kLinear && op.kind != OpKind::kLinearBackwardInput &&
          op.kind != OpKind::kLinearBackwardWeight)
        continue;
      const cuda::plan::GemmPlan p = cuda::plan::plan_gemm(op);
      const Key k{static_cast<int>(op.kind),
                  p.trans_a,
                  p.trans_b,
                  p.m,
                  p.n,
                  p.k,
                  p.lda,
                  p.ldb,
                  p.ldc,
                  static_cast<int>(op.inputs[p.a_in].meta.dtype),
                  static_cast<int>(op.outputs[0].meta.dtype),
                  p.bias ? static_cast<int>(op.inputs[2].meta.dtype) : -1};
      out.emplace(k, Gemm{op, p, label + ": " + op.name});
    }
  };
  const std::string dir = source_root() + "/scenarios/";
  for (const char* name :
       {"tiny-llama-h100.json", "tiny-gpt2-h100.json", "llama-1b-h100-bench.json"}) {
    Scenario s = load_scenario_file(dir + name);
    s.training.steps = 1;
    add(s, name, 0);
  }
  Scenario tp = load_scenario_file(dir + "tiny-llama-tp2-h100-4on1.json");
  tp.training.steps = 1;
  add(tp, "tiny-llama-tp2-h100-4on1.json", 0);
  return out;
}

double unit(DType d) {
  return std::ldexp(1.0, d == DType::kBFloat16 ? -8 : d == DType::kFloat16 ? -11 : -24);
}

double read_element(const void* base, DType d, int64_t i) {
  const size_t es = dtype_size(d);
  unsigned char b[4] = {};
  EXPECT_EQ(cudaMemcpy(b, static_cast<const char*>(base) + i * static_cast<int64_t>(es), es,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  uint16_t h;
  std::memcpy(&h, b, 2);
  if (d == DType::kBFloat16) return bf16_to_float(h);
  if (d == DType::kFloat16) return fp16_to_float(h);
  float f;
  std::memcpy(&f, b, 4);
  return f;
}

TEST(CudaGemmShapes, EveryGemmOfTheModelsMatchesAnFp64Reference) {
  const std::map<Key, Gemm> gemms = distinct_gemms();
  ASSERT_GE(gemms.size(), 9u) << "three linear kinds of several layers at least";
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  const size_t ws_bytes =
      32u << 20;  // the H100 / H200 profiles' blas_workspace_bytes (blas_workspace.json)
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  Slot a, b, bias, c;
  a.seed = 1, b.seed = 2, bias.seed = 3;
  std::mt19937 rng(41);
  for (const auto& [key, g] : gemms) {
    const cuda::plan::GemmPlan& p = g.plan;
    if (p.k == 0 || p.m == 0 || p.n == 0) continue;
    const OpCall& op = g.op;
    const DType dab = op.inputs[p.a_in].meta.dtype, dc = op.outputs[0].meta.dtype;
    const Pool& pa = a.fill(dab, op.inputs[p.a_in].nbytes());
    const Pool& pb = b.fill(dab, op.inputs[p.b_in].nbytes());
    const Pool* pbias =
        p.bias ? &bias.fill(op.inputs[2].meta.dtype, op.inputs[2].nbytes()) : nullptr;
    if (c.bytes < op.outputs[0].nbytes()) {
      if (c.p) cudaFree(c.p);
      c.bytes = op.outputs[0].nbytes();
      ASSERT_EQ(cudaMalloc(&c.p, c.bytes), cudaSuccess);
    }
    std::vector<void*> in(op.inputs.size());
    in[p.a_in] = a.p;
    in[p.b_in] = b.p;
    if (p.bias) in[2] = bias.p;
    const cuda::KernelContext ctx{stream, lt, ws, ws_bytes};
    const std::vector<void*> outs = {c.p};
    ASSERT_NO_THROW(cuda::launch_kernel(op, in, outs, ctx)) << g.where;
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << g.where;
    std::vector<std::pair<int64_t, int64_t>> at = {
        {0, 0}, {p.m - 1, 0}, {0, p.n - 1}, {p.m - 1, p.n - 1}};
    while (at.size() < static_cast<size_t>(kSamples))
      at.emplace_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(p.m)),
                      static_cast<int64_t>(rng() % static_cast<uint64_t>(p.n)));
    const double accum = 4 * std::ldexp(1.0, -24) * std::sqrt(static_cast<double>(p.k));
    int failures = 0;
    for (auto [i, j] : at) {
      double ref = pbias ? pbias->v[static_cast<size_t>(i % kPool)] : 0.0, s = std::abs(ref);
      for (int64_t l = 0; l < p.k; ++l) {
        const int64_t ai = p.trans_a ? l + i * p.lda : i + l * p.lda,
                      bi = p.trans_b ? j + l * p.ldb : l + j * p.ldb;
        const double prod =
            pa.v[static_cast<size_t>(ai % kPool)] * pb.v[static_cast<size_t>(bi % kPool)];
        ref += prod;
        s += std::abs(prod);
      }
      const double got = read_element(c.p, dc, i + j * p.ldc);
      const double tol = 2 * unit(dc) * std::abs(ref) + accum * s;
      if (!(std::abs(got - ref) <= tol) && failures++ < 3)
        ADD_FAILURE() << g.where << " (" << op_kind_name(op.kind) << " m " << p.m << " n " << p.n
                      << " k " << p.k << (p.trans_a ? " A^T" : "") << (p.trans_b ? " B^T" : "")
                      << ", " << dtype_name(dab) << " -> " << dtype_name(dc)
                      << (p.bias ? ", bias" : "") << "): C(" << i << ", " << j << ") is " << got
                      << ", fp64 reference " << ref << " (tolerance " << tol
                      << ", NOTE [GEMM shapes of the models])";
    }
    std::printf("%-28s m %6lld n %6lld k %6lld %s%s %s -> %s%s: %s\n", op_kind_name(op.kind),
                static_cast<long long>(p.m), static_cast<long long>(p.n),
                static_cast<long long>(p.k), p.trans_a ? "T" : "N", p.trans_b ? "T" : "N",
                std::string(dtype_name(dab)).c_str(), std::string(dtype_name(dc)).c_str(),
                p.bias ? " +bias" : "", failures ? "FAIL" : "ok");
  }
  cudaFree(ws);
  cublasLtDestroy(lt);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fullshard

int main(int argc, char** argv) {
  // --list: the distinct GEMMs only (host work, no GPU needed), one line each.
  if (argc > 1 && std::string(argv[1]) == "--list") {
    for (const auto& [key, g] : fullshard::distinct_gemms()) {
      const auto& p = g.plan;
      std::printf("%s m %lld n %lld k %lld %s%s %s -> %s%s  (%s)\n",
                  fullshard::op_kind_name(g.op.kind), static_cast<long long>(p.m),
                  static_cast<long long>(p.n), static_cast<long long>(p.k), p.trans_a ? "T" : "N",
                  p.trans_b ? "T" : "N",
                  std::string(fullshard::dtype_name(g.op.inputs[p.a_in].meta.dtype)).c_str(),
                  std::string(fullshard::dtype_name(g.op.outputs[0].meta.dtype)).c_str(),
                  p.bias ? " +bias" : "", g.where.c_str());
    }
    return 0;
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    std::printf("cuda_gemm_shapes_test: no CUDA device (%s), skipping\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
