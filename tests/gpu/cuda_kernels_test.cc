// Every CUDA kernel against the CPU reference kernels (fullshard::cpu::run_kernel) on the same
// random inputs, with the tolerances of docs/cuda-kernels.md (harness: kernel_compare.h;
// the eager decompositions' kernels: cuda_kernels_eager_test.cc). Needs a GPU: exits 77 (ctest:
// skipped) when cudaGetDeviceCount fails or finds none.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "core/runtime/cudnn_sdpa_workspace.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/launchers.h"
#include "backends/cuda/kernels/plan.h"
#include "core/optim/foreach_norm.h"
#include "tests/gpu/kernel_compare.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace fullshard;
using namespace ckt;
using kt::HT;
using kt::Vec;

TEST(CudaKernels, FillEveryDtype) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kUInt8})
    for (int64_t n : {1, 7, 1000}) {
      HT a(d, {n}), b(d, {n, 1});
      Both r = run_both(OpKind::kFill, {}, {&a, &b}, {}, {3.0});
      expect_bits(r.gpu[0], r.cpu[0], "fill");
      expect_bits(r.gpu[1], r.cpu[1], "fill");
      r = run_both(OpKind::kFill, {}, {&a}, {}, {}, 2);  // zeros, misaligned
      expect_bits(r.gpu[0], r.cpu[0], "fill zero");
    }
}

TEST(CudaKernels, CopiesAndCastsAreBitExact) {
  std::mt19937 rng(11);
  for (DType s : kFloats)
    for (DType d : kFloats)
      for (int64_t n : {1, 13, 4096})
        for (size_t mis : {size_t{0}, size_t{4}}) {
          HT x = kt::random_tensor(s, {n}, rng, -70000, 70000), y(d, {n});
          Both r = run_both(OpKind::kCopy, {&x}, {&y}, {}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "copy " + name(s) + "->" + name(d));
        }
  HT a = kt::random_tensor(DType::kBFloat16, {9, 3}, rng),
     b = kt::random_tensor(DType::kFloat32, {9, 8}, rng);
  HT y(DType::kBFloat16, {9, 11});
  Both r = run_both(OpKind::kCopy, {&a, &b}, {&y}, {9});
  expect_bits(r.gpu[0], r.cpu[0], "row concat");
  HT i64(DType::kInt64, {5}), o64(DType::kInt64, {5});
  for (int i = 0; i < 5; ++i) i64.set(i, 1000 * i - 7);
  r = run_both(OpKind::kCopy, {&i64}, {&o64});
  expect_bits(r.gpu[0], r.cpu[0], "int64 copy");
}

TEST(CudaKernels, FsdpCopiesAreBitExact) {
  std::mt19937 rng(12);
  HT s0 = kt::random_tensor(DType::kFloat32, {6}, rng),
     s1 = kt::random_tensor(DType::kFloat32, {1}, rng);
  HT s2 = kt::random_tensor(DType::kFloat32, {4096}, rng), slice(DType::kBFloat16, {4103});
  Both r = run_both(OpKind::kAllGatherCopyIn, {&s0, &s1, &s2}, {&slice});
  expect_bits(r.gpu[0], r.cpu[0], "copy-in");
  const int64_t W = 4;
  HT ag = kt::random_tensor(DType::kBFloat16, {W * 4103}, rng);
  HT u0(DType::kBFloat16, {W * 6}), u1(DType::kBFloat16, {W * 1}), u2(DType::kBFloat16, {W * 4096});
  r = run_both(OpKind::kAllGatherCopyOut, {&ag}, {&u0, &u1, &u2}, {6, 1, 4096, W});
  for (int i = 0; i < 3; ++i) expect_bits(r.gpu[i], r.cpu[i], "copy-out " + std::to_string(i));
  HT g0 = kt::random_tensor(DType::kBFloat16, {17, 3}, rng),
     g1 = kt::random_tensor(DType::kBFloat16, {64, 64}, rng);
  const int64_t row = 5 * 3 + 16 * 64;
  for (DType d : {DType::kBFloat16, DType::kFloat32}) {
    HT rs(d, {W * row});
    r = run_both(OpKind::kChunkCat, {&g0, &g1}, {&rs}, {W});
    expect_bits(r.gpu[0], r.cpu[0], "chunk-cat");
  }
}

// NOTE [GELU tolerance]: GELU's tanh is 1 - 2 / (1 + expf(2u)) on both sides (elementwise.cu,
// elementwise.cc), but CUDA's expf is within 2 ulp where glibc's is within 1, and nvcc contracts
// u, 1 - t*t and the sums into FMAs where the host rounds each step. t is then off by a few units
// of 2^-24 in absolute terms (not relative: near |t| = 1 the 1 - 2/(...) step cancels), and that
// error is multiplied by d(out)/dt: 0.5 |x| in the forward, |g| (0.5 + |x| du) in the backward,
// up to 42 at |x|, |g| <= 4. The GPU run's element 7904 (0.175337553 vs 0.175339654, 2.1e-6 off,
// at a fixed atol of 1e-6) is such a case. The bound per element is that sensitivity times
// kTanhUlps units of 2^-24 (2 for expf, 1 for the division, 1 for the subtraction, up to 2 for
// u's contraction through dt/du <= 1: 6, doubled), plus the CPU's own relative tolerance (a few
// fp32 ulp of the rest, or one unit of a 16-bit output). A host emulation (20M (x, g) in
// [-4, 4], FMAs where nvcc may contract, expf moved by up to 2 ulp) peaks at 0.31 of this bound
// (docs/history.md has the fixed tolerance it replaced); an indexing or formula error moves an
// element by its own size, thousands of times more.
constexpr double kTanhUlps = 12;
void expect_gelu_close(const HT& gpu, const HT& cpu, const HT& x, const HT* g,
                       const std::string& what) {
  const std::vector<double> a = gpu.values(), e = cpu.values(), xs = x.values();
  const std::vector<double> gs = g ? g->values() : std::vector<double>();
  const double rel = std::max(4e-6, 2 * kt::rel_eps(cpu.meta.dtype)),
               eps_t = kTanhUlps * std::ldexp(1.0, -24);
  for (size_t i = 0; i < e.size(); ++i) {
    const double ax = std::abs(xs[i]), du = 0.7978845608028654 * (1 + 3 * 0.044715 * ax * ax);
    const double sens = g ? std::abs(gs[i]) * (0.5 + ax * du) : 0.5 * ax;
    const double tol = sens * eps_t + rel * std::abs(e[i]) + 1e-30;
    if (!(std::abs(a[i] - e[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i]
                    << " (x " << xs[i] << ", bound " << tol << ", NOTE [GELU tolerance])";
      return;
    }
  }
}

TEST(CudaKernels, PointwiseOps) {
  std::mt19937 rng(13);
  for (DType d : kFloats)
    for (int64_t n : {1, 7, 8, 10000})
      for (size_t mis : {size_t{0}, size_t{4}}) {
        HT a = kt::random_tensor(d, {n}, rng, -4, 4),
           b = kt::random_tensor(DType::kFloat32, {n}, rng, -4, 4);
        HT y(d, {n}), y2(d, {n});
        Both r = run_both(OpKind::kAdd, {&a, &b}, {&y}, {}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "add " + name(d));
        r = run_both(OpKind::kAdd, {&b, &a}, {&b}, {}, {}, mis);  // in place, fp32 accumulation
        expect_bits(r.gpu[0], r.cpu[0], "add in place");
        r = run_both(OpKind::kMul, {&a, &b}, {&y}, {}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "mul");
        r = run_both(OpKind::kScale, {&a}, {&a}, {}, {0.125 / 3}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "scale");
        r = run_both(OpKind::kMulBackward, {&a, &b, &a}, {&y, &y2}, {}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "mul backward a");
        expect_bits(r.gpu[1], r.cpu[1], "mul backward b");
        // expf on the GPU is within 2 ulp of glibc's: a few fp32 ulp, or one ulp of bf16 / fp16.
        r = run_both(OpKind::kSiLU, {&a}, {&y}, {}, {}, mis);
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 4e-6, "SiLU");
        r = run_both(OpKind::kSiLUBackward, {&b, &a}, {&y}, {}, {}, mis);
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 4e-6, "SiLUBackward");
        r = run_both(OpKind::kGELU, {&a}, {&y}, {}, {}, mis);
        expect_gelu_close(r.gpu[0], r.cpu[0], a, nullptr, "GELU " + name(d));
        r = run_both(OpKind::kGELUBackward, {&b, &a}, {&y}, {}, {}, mis);
        expect_gelu_close(r.gpu[0], r.cpu[0], a, &b, "GELUBackward " + name(d));
      }
}

TEST(CudaKernels, EmbeddingsAreBitExact) {
  std::mt19937 rng(14);
  for (DType d : kFloats)
    for (auto [n, V, D] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {37, 11, 7}, {300, 50, 96}}) {
      HT ids(DType::kInt64, {n});
      std::uniform_int_distribution<int64_t> u(0, V - 1);
      for (int64_t t = 0; t < n; ++t) ids.set(t, static_cast<double>(u(rng)));
      HT w = kt::random_tensor(d, {V, D}, rng), y(d, {n, D});
      Both r = run_both(OpKind::kEmbedding, {&ids, &w}, {&y});
      expect_bits(r.gpu[0], r.cpu[0], "embedding");
      HT g = kt::random_tensor(d, {n, D}, rng), gw(d, {V, D});
      r = run_both(OpKind::kEmbeddingBackward, {&g, &ids}, {&gw});
      expect_bits(r.gpu[0], r.cpu[0], "embedding backward " + name(d));  // same fp32 order
      HT x = kt::random_tensor(d, {2, n, D}, rng), wpe = kt::random_tensor(d, {n + 3, D}, rng),
         yp(d, {2, n, D});
      r = run_both(OpKind::kPositionEmbedding, {&x, &wpe}, {&yp});
      expect_bits(r.gpu[0], r.cpu[0], "position embedding");
      HT gwpe(d, {n + 3, D});
      r = run_both(OpKind::kPositionEmbeddingBackward, {&x}, {&gwpe});
      expect_bits(r.gpu[0], r.cpu[0], "position embedding backward");
    }
}

TEST(CudaKernels, RoPE) {
  std::mt19937 rng(15);
  for (DType d : kFloats)
    for (auto [S, H, hd] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2}, {37, 3, 8}, {129, 4, 64}}) {
      HT x = kt::random_tensor(d, {2, S, H * hd}, rng), y(d, {2, S, H * hd});
      for (OpKind k : {OpKind::kRoPE, OpKind::kRoPEBackward})
        // NOTE [RoPE in fp32] (core/runtime/rope_args.h): fp32 angles on both sides; the GPU takes
        // cos / sin of them in double rounded once, glibc's cosf / sinf may differ by an ulp. Plain
        // theta and Llama 3.1's scaled frequencies (fargs of 5), in place too.
        for (const std::vector<double>& f :
             {std::vector<double>{500000.0}, {500000.0, 8.0, 1.0, 4.0, 8192.0}}) {
          Both r = run_both(k, {&x}, {&y}, {hd}, f);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, op_kind_name(k));
          HT z = x;
          r = run_both(k, {&z}, {&z}, {hd}, f);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, std::string(op_kind_name(k)) + " in place");
        }
    }
}

TEST(CudaKernels, Norms) {
  std::mt19937 rng(16);
  for (DType d : kFloats)
    for (auto [rows, D] : {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {300, 768}, {3, 2050}}) {
      HT x = kt::random_tensor(d, {rows, D}, rng, -2, 2),
         w = kt::random_tensor(d, {D}, rng, 0.5, 1.5);
      HT b = kt::random_tensor(d, {D}, rng), y(d, {rows, D}), mean(DType::kFloat32, {rows}),
         rstd(DType::kFloat32, {rows});
      Both r = run_both(OpKind::kRMSNorm, {&x, &w}, {&y, &rstd}, {}, {1e-5});
      expect_close(r.gpu[1], r.cpu[1], 0, 1e-6, "rms rstd");
      expect_close(r.gpu[0], r.cpu[0], 1e-6, 2e-6, "rms y");
      HT g = kt::random_tensor(d, {rows, D}, rng), gx(d, {rows, D}), gw(d, {D}), gb(d, {D});
      HT rs = r.cpu[1];
      r = run_both(OpKind::kRMSNormBackward, {&g, &x, &rs, &w}, {&gx, &gw});
      expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "rms gx");
      expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "rms gw");
      r = run_both(OpKind::kLayerNorm, {&x, &w, &b}, {&y, &mean, &rstd}, {}, {1e-5});
      expect_close(r.gpu[1], r.cpu[1], 1e-7, 1e-6, "ln mean");
      expect_close(r.gpu[2], r.cpu[2], 0, 1e-6, "ln rstd");
      expect_close(r.gpu[0], r.cpu[0], 1e-6, 2e-6, "ln y");
      HT mu = r.cpu[1], rs2 = r.cpu[2];
      r = run_both(OpKind::kLayerNormBackward, {&g, &x, &mu, &rs2, &w}, {&gx, &gw, &gb});
      expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "ln gx");
      expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "ln gw");
      expect_close(r.gpu[2], r.cpu[2], 1e-6, 1e-6, "ln gb");
    }
}

// A profile with blas_workspace_bytes 0 gives cuBLASLt no workspace: the heuristic's other
// algorithms must give the same results.
TEST(CudaKernels, LinearWithoutAWorkspace) {
  std::mt19937 rng(19);
  dev().use_ws = false;
  for (DType dt : {DType::kFloat32, DType::kBFloat16})
    for (auto [M, K, N] :
         {std::tuple<int64_t, int64_t, int64_t>{3, 5, 7}, {257, 129, 65}, {512, 1024, 768}}) {
      HT x = kt::random_tensor(dt, {M, K}, rng), w = kt::random_tensor(dt, {N, K}, rng),
         y(dt, {M, N});
      Both r = run_both(OpKind::kLinear, {&x, &w}, {&y}, {M, K, N});
      expect_close(r.gpu[0], r.cpu[0], 1e-5 * static_cast<double>(K), 1e-5, "linear, no workspace");
      HT g = kt::random_tensor(dt, {M, N}, rng), gW(dt, {N, K});
      r = run_both(OpKind::kLinearBackwardWeight, {&g, &x}, {&gW}, {M, K, N});
      expect_close(r.gpu[0], r.cpu[0], 1e-5 * static_cast<double>(M), 1e-5,
                   "linear backward weight, no workspace");
    }
  dev().use_ws = true;
}

TEST(CudaKernels, LinearThroughCublasLt) {
  std::mt19937 rng(17);
  struct Combo {
    DType ab, c;
  };
  for (Combo cb :
       {Combo{DType::kFloat32, DType::kFloat32}, Combo{DType::kBFloat16, DType::kBFloat16},
        Combo{DType::kFloat16, DType::kFloat16}, Combo{DType::kBFloat16, DType::kFloat32}})
    for (auto [M, K, N] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 5, 7}, {64, 96, 40}, {257, 129, 65}})
      for (bool bias : {false, true}) {
        HT x = kt::random_tensor(cb.ab, {M, K}, rng), w = kt::random_tensor(cb.ab, {N, K}, rng);
        HT b = kt::random_tensor(cb.c, {N}, rng), y(cb.c, {M, N});
        std::vector<HT*> ins = {&x, &w};
        if (bias) ins.push_back(&b);
        // fp32: summation order only (no TF32); 16-bit: fp32 accumulate, one rounding each side.
        const double atol = 1e-5 * static_cast<double>(K);
        Both r = run_both(OpKind::kLinear, ins, {&y}, {M, K, N});
        expect_close(r.gpu[0], r.cpu[0], atol, 1e-5, "linear");
        HT g = kt::random_tensor(cb.ab, {M, N}, rng), gx(cb.c, {M, K}), gW(cb.c, {N, K});
        r = run_both(OpKind::kLinearBackwardInput, {&g, &w}, {&gx}, {M, K, N});
        expect_close(r.gpu[0], r.cpu[0], 1e-5 * static_cast<double>(N), 1e-5,
                     "linear backward input");
        r = run_both(OpKind::kLinearBackwardWeight, {&g, &x}, {&gW}, {M, K, N});
        expect_close(r.gpu[0], r.cpu[0], 1e-5 * static_cast<double>(M), 1e-5,
                     "linear backward weight");
        HT gb(cb.c, {N});
        r = run_both(OpKind::kLinearBackwardBias, {&g}, {&gb}, {M, N});
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "linear backward bias");
      }
  const size_t planned = cuda::gemm_cache_size();
  HT x = kt::random_tensor(DType::kBFloat16, {3, 5}, rng),
     w = kt::random_tensor(DType::kBFloat16, {7, 5}, rng);
  HT y(DType::kBFloat16, {3, 7});
  run_both(OpKind::kLinear, {&x, &w}, {&y}, {3, 5, 7});
  EXPECT_EQ(cuda::gemm_cache_size(), planned) << "a repeated shape must reuse its cuBLASLt plan";
}

struct AttnCase {
  int64_t B, S, H, Hkv, hd, packed;
  DType dt;
};

// One attention problem on the host: random q, k, v (or packed qkv) and dO, O and lse (the
// backward's saved inputs: the CPU forward's when cpu_forward), and the backward's outputs
// with the flash temporaries.
struct AttnProblem {
  AttnCase c;
  std::vector<int64_t> args;
  HT qkv, q, k, v, o, lse, dO, dq, dk, dv, sd, acc, dke, dve;
  std::vector<HT*> fwd_ins() {
    return c.packed ? std::vector<HT*>{&qkv} : std::vector<HT*>{&q, &k, &v};
  }
  std::vector<HT*> bwd_ins() {
    return c.packed ? std::vector<HT*>{&dO, &qkv, &o, &lse}
                    : std::vector<HT*>{&dO, &q, &k, &v, &o, &lse};
  }
  std::vector<HT*> bwd_outs() {
    std::vector<HT*> r = {&dq, &dk, &dv, &sd, &acc};
    if (c.H != c.Hkv) r.insert(r.end(), {&dke, &dve});
    return r;
  }
  cuda::plan::AttnPlan plan() {
    return cuda::plan::plan_attention_backward(
        kt::make_call(OpKind::kAttentionBackward, bwd_ins(), bwd_outs(), args));
  }
  std::string what() const {
    return "attention B" + std::to_string(c.B) + " S" + std::to_string(c.S) + " H" +
           std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " hd" + std::to_string(c.hd) + " " +
           name(c.dt) + (c.packed ? " packed" : "");
  }
};
AttnProblem attention_problem(const AttnCase& c, std::mt19937& rng, bool cpu_forward = true) {
  AttnProblem p;
  p.c = c;
  p.args = {c.B, c.S, c.H, c.Hkv, c.hd, c.packed};
  const int64_t D = c.H * c.hd, Dkv = c.Hkv * c.hd, tokens = c.B * c.S,
                sr = (c.S + 127) / 128 * 128;
  p.qkv = kt::random_tensor(c.dt, {c.B, c.S, 3 * D}, rng, -2, 2);
  p.q = kt::random_tensor(c.dt, {c.B, c.S, D}, rng, -2, 2);
  p.k = kt::random_tensor(c.dt, {c.B, c.S, Dkv}, rng, -2, 2);
  p.v = kt::random_tensor(c.dt, {c.B, c.S, Dkv}, rng);
  p.o = HT(c.dt, {c.B, c.S, c.H, c.hd});
  p.lse = HT(DType::kFloat32, {c.B, c.H, c.S});
  if (cpu_forward) kt::run(OpKind::kAttention, p.fwd_ins(), {&p.o, &p.lse}, p.args);
  p.dO = kt::random_tensor(c.dt, {c.B, c.S, c.H, c.hd}, rng);
  p.dq = HT(c.dt, {tokens, D});
  p.dk = HT(c.dt, {tokens, c.packed ? D : Dkv});
  p.dv = HT(c.dt, {tokens, c.packed ? D : Dkv});
  p.sd = HT(DType::kFloat32, {c.B, c.H, sr});
  p.acc = HT(DType::kFloat32, {c.B, sr, c.H, (c.hd + 31) / 32 * 32});
  p.dke = HT(c.dt, {c.B, c.S, c.H, c.hd});
  p.dve = HT(c.dt, {c.B, c.S, c.H, c.hd});
  return p;
}

// Whether the dispatcher runs tensor-core kernels (FlashAttention-2 or WMMA) for this problem
// (cudaMalloc'd bases are aligned; NOTE [Attention kernel override] can turn them off).
bool dispatch_uses_tensor_cores(AttnProblem& p) {
  using cuda::plan::AttentionKernels;
  const AttentionKernels env = cuda::plan::attention_kernels_from_env();
  return (env == AttentionKernels::kAuto && cuda::plan::attention_uses_fa2(p.plan(), p.c.dt)) ||
         (env != AttentionKernels::kSimt &&
          cuda::plan::attention_uses_tensor_cores(p.plan(), p.c.dt));
}

// NOTE [Tensor-core backward tolerances]: the tensor-core backwards (WMMA and FlashAttention-2)
// round P and dS to the storage dtype before their products (as FlashAttention-2); the CPU
// reference and the SIMT kernels keep them in fp32. Each rounding is <= 2^-8 relative (bf16) /
// 2^-11 (fp16), and the outputs, rounded once from slightly different fp32 values, can differ by
// one unit in the last place: up to 2^-7 (bf16) / 2^-10 (fp16) of the largest gradient. A host
// emulation of exactly these roundings against an fp64 reference (300 seeds, S <= 200, the value
// ranges used here) peaked at 7.1e-3 (bf16) and 7.7e-4 (fp16) of the largest gradient, so these
// bounds, relative to the largest |dq|, |dk|, |dv|, keep a 2x margin or more; an indexing or
// masking error moves gradients by their own size.
double tc_backward_tolerance(DType dt) { return dt == DType::kBFloat16 ? 1.5e-2 : 5e-3; }

double largest_gradient(const std::vector<HT>& g) {
  return std::max(
      {kt::max_abs(g[0].values()), kt::max_abs(g[1].values()), kt::max_abs(g[2].values()), 1e-3});
}

// Forward (O, lse) and backward (dq, dk, dv) against the CPU kernels. O and lse of the CPU's
// forward feed both backwards.
void check_attention(AttnProblem& p) {
  const bool half = p.c.dt != DType::kFloat32, tc = dispatch_uses_tensor_cores(p);
  HT o(p.c.dt, p.o.meta.shape), lse(DType::kFloat32, p.lse.meta.shape);
  Both r = run_both(OpKind::kAttention, p.fwd_ins(), {&o, &lse}, p.args);
  // Outputs are convex combinations of v rows (|v| <= 1): absolute tolerances. 16-bit: flash
  // rounds P to the storage dtype before P V, as PyTorch's kernels do.
  expect_close(r.gpu[0], r.cpu[0], half ? 1.5e-2 : 2e-5, 0, p.what() + " O");
  expect_close(r.gpu[1], r.cpu[1], half ? 2e-3 : 2e-5, 1e-6, p.what() + " lse");
  r = run_both(OpKind::kAttentionBackward, p.bwd_ins(), p.bwd_outs(), p.args);
  // SIMT: fp32 throughout, the gradients rounded once (1e-2 for 16-bit covers a one-ulp
  // difference of the largest); tensor cores: NOTE [Tensor-core backward tolerances].
  const double rel = tc ? tc_backward_tolerance(p.c.dt) : half ? 1e-2 : 1e-5;
  const double tol = rel * largest_gradient(r.cpu);
  for (int i = 0; i < 3; ++i) expect_close(r.gpu[i], r.cpu[i], tol, 0, p.what() + " d" + "qkv"[i]);
}

TEST(CudaKernels, AttentionForwardAndBackward) {
  std::mt19937 rng(18);
  for (AttnCase c :
       {AttnCase{1, 1, 1, 1, 8, 0, DType::kFloat32}, AttnCase{2, 37, 4, 2, 40, 0, DType::kFloat32},
        AttnCase{2, 37, 4, 2, 40, 0, DType::kBFloat16},
        AttnCase{1, 130, 4, 1, 64, 0, DType::kBFloat16},
        AttnCase{1, 200, 2, 2, 128, 0, DType::kFloat16},
        AttnCase{2, 65, 2, 2, 64, 1, DType::kBFloat16},
        AttnCase{1, 33, 2, 2, 256, 1, DType::kFloat32}}) {
    AttnProblem p = attention_problem(c, rng);
    check_attention(p);
  }
}

// The tensor-core kernels (bf16 / fp16, aligned bases; FlashAttention-2 by default, WMMA with
// FULLSHARD_ATTENTION_KERNELS=wmma) through the dispatcher against the CPU kernels, on every
// combination the kernels special-case: both dtypes, every head dim a model uses (32, 64, 80,
// 96, 128; WMMA: 64 and 128), GQA groups 1, 4 and 8 (every kv head read), sequences shorter than
// a tile (1, 63), one past it (65), ending inside a later tile (200) and spanning several tiles
// of both passes at an odd length (333), batch 2.
TEST(CudaKernels, AttentionTensorCoresMatchCpu) {
  using cuda::plan::AttentionKernels;
  if (cuda::plan::attention_kernels_from_env() == AttentionKernels::kSimt)
    GTEST_SKIP() << "FULLSHARD_ATTENTION_KERNELS=simt turns the tensor-core kernels off";
  const bool fa2 = cuda::plan::attention_kernels_from_env() == AttentionKernels::kAuto;
  std::mt19937 rng(21);
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t hd : {32, 64, 80, 96, 128}) {
      if (!fa2 && hd != 64 && hd != 128) continue;
      for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {8, 1}})
        for (int64_t S : {1, 63, 65, 200, 333}) {
          if (S == 333 && hd != 64 && hd != 128)
            continue;  // the sanitizer stage runs this test too
          AttnProblem p = attention_problem(AttnCase{2, S, H, Hkv, hd, 0, dt}, rng);
          ASSERT_TRUE(dispatch_uses_tensor_cores(p)) << p.what();
          check_attention(p);
        }
    }
}

// NOTE [SDPA variants on the CUDA backend] (plan.cc): the efficient and cuDNN kinds run the flash
// kernels with the model's outputs: efficient pads logsumexp rows to round32(S) (padding left
// unwritten, so only the first S of each row are compared) and passes delta and a dq workspace
// (plus an fp32 output accumulator above head_dim 128); cuDNN passes one workspace whose first
// B*H*S floats hold softmax_d. Each against the CPU kernels, SIMT and tensor-core shapes, with
// the tolerances of check_attention.
std::vector<double> lse_rows(const HT& lse, int64_t rows, int64_t S, int64_t ld) {
  const std::vector<double> all = lse.values();
  std::vector<double> r;
  for (int64_t i = 0; i < rows; ++i)
    r.insert(r.end(), all.begin() + i * ld, all.begin() + i * ld + S);
  return r;
}

TEST(CudaKernels, AttentionEfficientAndCudnnMatchCpu) {
  std::mt19937 rng(23);
  const cuda::cudnn_sdpa::Counters before = cuda::cudnn_sdpa::counters();
  for (bool cudnn : {false, true})
    for (AttnCase c : {AttnCase{2, 37, 4, 4, 40, 0, DType::kFloat32},
                       AttnCase{1, 130, 4, 4, 64, 0, DType::kBFloat16},
                       AttnCase{2, 65, 8, cudnn ? 2 : 8, 128, 0, DType::kFloat16},
                       AttnCase{1, 33, 2, 2, 256, 0, DType::kFloat32}}) {
      AttnProblem p = attention_problem(c, rng);
      const bool half = c.dt != DType::kFloat32;
      const int64_t lse_ld = cudnn ? c.S : (c.S + 31) / 32 * 32;
      std::vector<int64_t> args = p.args;
      args.push_back(lse_ld);
      const std::string what = p.what() + (cudnn ? " cudnn" : " efficient");
      HT o(c.dt, p.o.meta.shape), lse(DType::kFloat32, {c.B, c.H, lse_ld});
      HT accum(DType::kFloat32, p.o.meta.shape);
      std::vector<HT*> fwd_outs = {&o, &lse};
      if (!cudnn && c.hd > 128) fwd_outs.push_back(&accum);
      Both r = run_both(cudnn ? OpKind::kAttentionCudnn : OpKind::kAttentionEfficient, p.fwd_ins(),
                        fwd_outs, args);
      expect_close(r.gpu[0], r.cpu[0], half ? 1.5e-2 : 2e-5, 0, what + " O");
      const std::string m = kt::mismatch(lse_rows(r.gpu[1], c.B * c.H, c.S, lse_ld),
                                         lse_rows(r.cpu[1], c.B * c.H, c.S, lse_ld),
                                         half ? 2e-3 : 2e-5, 1e-6, what + " lse");
      EXPECT_TRUE(m.empty()) << m;
      // The backward reads the CPU forward's O and lse (padded rows for efficient).
      HT lse_padded(DType::kFloat32, {c.B, c.H, lse_ld});
      std::vector<HT*> ref_outs = {&p.o, &lse_padded};
      if (!cudnn && c.hd > 128) ref_outs.push_back(&accum);  // as the model emits it
      kt::run(cudnn ? OpKind::kAttentionCudnn : OpKind::kAttentionEfficient, p.fwd_ins(), ref_outs,
              args);
      std::vector<HT*> ins = p.bwd_ins();
      ins.back() = &lse_padded;
      HT delta(DType::kFloat32, {c.B, c.H, c.S});
      HT ws(DType::kFloat32, {c.B, c.H, (c.S + 127) / 128 * 128, (c.hd + 127) / 128 * 128});
      HT cudnn_ws(DType::kFloat32, {cudnn_sdpa_workspace(true, c.B, c.S, c.H, c.hd).total() /
                                    4});  // the model's block
      std::vector<HT*> outs = {&p.dq, &p.dk, &p.dv};
      if (cudnn) {
        outs.push_back(&cudnn_ws);
      } else {
        outs.insert(outs.end(), {&delta, &ws});
      }
      const bool tc = dispatch_uses_tensor_cores(p);  // the flash plan of the same problem
      r = run_both(cudnn ? OpKind::kAttentionCudnnBackward : OpKind::kAttentionEfficientBackward,
                   ins, outs, args);
      const double rel = tc ? tc_backward_tolerance(c.dt) : half ? 1e-2 : 1e-5;
      const double tol = rel * largest_gradient(r.cpu);
      for (int i = 0; i < 3; ++i) expect_close(r.gpu[i], r.cpu[i], tol, 0, what + " d" + "qkv"[i]);
    }
  // NOTE [cuDNN attention on the CUDA backend] (backends/cuda/kernels/cudnn_sdpa.cc): with cuDNN in
  // the build, its kernels ran the 16-bit cuDNN cases above (bf16 head_dim 64, fp16 head_dim 128
  // with GQA; the fp32 ones are not cuDNN's), forward and backward once each.
  const cuda::cudnn_sdpa::Counters after = cuda::cudnn_sdpa::counters();
  const char* env = std::getenv("FULLSHARD_CUDNN_ATTENTION");
  if (cuda::cudnn_sdpa::built_with_cudnn() && !(env != nullptr && std::string(env) == "off")) {
    EXPECT_EQ(after.backward - before.backward, 2)
        << "cuDNN declined: see the 'cuDNN attention' lines on stderr";
    EXPECT_GE(after.forward - before.forward, 2);
  }
  std::printf(
      "cuDNN attention: %lld forward, %lld backward, %lld declined (built with cuDNN: %s)\n",
      static_cast<long long>(after.forward - before.forward),
      static_cast<long long>(after.backward - before.backward),
      static_cast<long long>(after.declined - before.declined),
      cuda::cudnn_sdpa::built_with_cudnn() ? "yes" : "no");
  for (const std::string& line : cuda::cudnn_sdpa::plans())
    std::printf("  cuDNN plan: %s\n", line.c_str());
}

// A device copy of a host tensor, or (copy = false) its size in 0xFF bytes: NaN until written.
struct DeviceTensor {
  TensorMeta meta;
  void* p = nullptr;
  explicit DeviceTensor(const HT& t, bool copy = true) : meta(t.meta) {
    EXPECT_EQ(cudaMalloc(&p, meta.nbytes()), cudaSuccess);
    if (copy) {
      cudaMemcpy(p, t.data(), meta.nbytes(), cudaMemcpyHostToDevice);
    } else {
      cudaMemset(p, 0xff, meta.nbytes());
    }
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(p); }
  HT host() const {
    HT t(meta.dtype, meta.shape);
    cudaMemcpy(t.data(), p, meta.nbytes(), cudaMemcpyDeviceToHost);
    return t;
  }
};

// The tensor-core kernels against the SIMT ones through the launchers themselves (so the
// environment override cannot change what runs) on the same device inputs, with O and lse
// from the WMMA forward, at lengths spanning many tiles. The FlashAttention-2 forward matches the
// WMMA forward. Backward: WMMA twice, bit for bit (no atomics); FlashAttention-2 twice: dk and
// dv bit for bit, dq (fp32 atomics into dq_accum, NOTE [FlashAttention-2 backward]) within the
// tolerance. Its temporaries start as NaN (0xFF bytes): dq_accum must be zeroed and every
// expanded dk / dv row written before the GQA sum reads it.
TEST(CudaKernels, AttentionBackwardTensorCoresMatchSimt) {
  using cuda::launch::AttnKernel;
  std::mt19937 rng(22);
  for (AttnCase c : {AttnCase{2, 1000, 8, 2, 128, 0, DType::kBFloat16},
                     AttnCase{2, 333, 4, 4, 64, 0, DType::kFloat16},
                     AttnCase{1, 130, 4, 4, 64, 1, DType::kBFloat16},
                     AttnCase{2, 200, 4, 1, 128, 0, DType::kFloat16},
                     AttnCase{2, 1000, 8, 1, 64, 0, DType::kBFloat16},
                     AttnCase{1, 517, 4, 1, 96, 0, DType::kFloat16}}) {
    AttnProblem p = attention_problem(c, rng, /*cpu_forward=*/false);
    const cuda::plan::AttnPlan plan = p.plan();
    const bool wmma = cuda::plan::attention_uses_tensor_cores(plan, c.dt);
    const int dt = cuda::plan::dcode(c.dt);
    const cudaStream_t s = dev().stream;
    DeviceTensor gq(c.packed ? p.qkv : p.q), gk(p.k), gv(p.v), gdO(p.dO);
    DeviceTensor go(p.o, false), glse(p.lse, false), gsd(p.sd, false);
    const void* q = gq.p;
    const void* k = c.packed ? gq.p : gk.p;  // packed: one qkv buffer, k and v at column offsets
    const void* v = c.packed ? gq.p : gv.p;
    cuda::launch::attention_forward(plan.l, q, k, v, dt, go.p, dt, static_cast<float*>(glse.p),
                                    wmma ? AttnKernel::kWmma : AttnKernel::kSimt, s);
    {
      DeviceTensor fo(p.o, false), flse(p.lse, false);
      cuda::launch::attention_forward(plan.l, q, k, v, dt, fo.p, dt, static_cast<float*>(flse.p),
                                      AttnKernel::kFa2, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << p.what();
      expect_close(fo.host(), go.host(), 1.5e-2, 0,
                   p.what() + " O FlashAttention-2 vs " + (wmma ? "WMMA" : "SIMT"));
      expect_close(flse.host(), glse.host(), 2e-3, 1e-6, p.what() + " lse FlashAttention-2");
    }
    const std::vector<AttnKernel> kernels =
        wmma ? std::vector<AttnKernel>{AttnKernel::kSimt, AttnKernel::kWmma, AttnKernel::kWmma,
                                       AttnKernel::kFa2, AttnKernel::kFa2}
             : std::vector<AttnKernel>{AttnKernel::kSimt, AttnKernel::kFa2, AttnKernel::kFa2};
    std::vector<std::vector<HT>> runs;
    for (AttnKernel kernel : kernels) {
      DeviceTensor gdq(p.dq, false), gdk(p.dk, false), gdv(p.dv, false);
      DeviceTensor gacc(p.acc, false), gdke(p.dke, false), gdve(p.dve, false);
      cuda::launch::AttnGrads g{
          gdq.p, gdk.p, gdv.p, dt, dt, dt, static_cast<float*>(gsd.p), plan.softmax_d_ld};
      g.dq_accum = static_cast<float*>(gacc.p);
      g.dq_accum_rows = plan.softmax_d_ld;
      g.dq_accum_hd = (c.hd + 31) / 32 * 32;
      if (c.H != c.Hkv) {
        g.dk_expanded = gdke.p;
        g.dv_expanded = gdve.p;
        g.dd_expanded = dt;
      }
      cuda::launch::attention_backward(plan.l, gdO.p, dt, q, k, v, dt, go.p, dt,
                                       static_cast<const float*>(glse.p), g, kernel, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << p.what();
      runs.push_back({gdq.host(), gdk.host(), gdv.host()});
    }
    const double tol = tc_backward_tolerance(c.dt) * largest_gradient(runs[0]);
    for (size_t r = 1; r < runs.size(); r += 2) {
      const std::string name = kernels[r] == AttnKernel::kWmma ? " WMMA" : " FlashAttention-2";
      for (int i = 0; i < 3; ++i) {
        const std::string what = p.what() + " d" + "qkv"[i] + name;
        expect_close(runs[r][i], runs[0][i], tol, 0, what + " vs SIMT");
        if (kernels[r] == AttnKernel::kWmma || i > 0) {
          expect_bits(runs[r + 1][i], runs[r][i], what + ", second run");
        } else {
          expect_close(runs[r + 1][i], runs[r][i], tol, 0, what + ", second run");
        }
      }
    }
  }
}

TEST(CudaKernels, LogSoftmaxAndNllLoss) {
  std::mt19937 rng(19);
  for (DType d : kFloats)
    for (auto [rows, V] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {4, 50257}, {1000, 13}}) {
      HT x = kt::random_tensor(d, {rows, V}, rng, -8, 8), y(d, {rows, V});
      Both r = run_both(OpKind::kLogSoftmax, {&x}, {&y});
      expect_close(r.gpu[0], r.cpu[0], 2e-6 * 16, 1e-6, "log_softmax");
      HT ly = r.cpu[0], g = kt::random_tensor(d, {rows, V}, rng), gx(d, {rows, V});
      r = run_both(OpKind::kLogSoftmaxBackward, {&g, &ly}, {&gx});
      expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "log_softmax backward");
      HT labels(DType::kInt64, {rows});
      for (int64_t i = 0; i < rows; ++i) labels.set(i, i % 3 == 2 ? -100 : (i * 7919) % V);
      // loss and total_weight in fp32 (the fp32-logits losses) or in the logits' dtype
      // (model.implementation loss "bf16_logits": aten's nll_loss keeps the input dtype; 667
      // counted rows of 1000 round in bf16).
      for (DType ld : {DType::kFloat32, d}) {
        HT loss(ld, {}), tw(ld, {});
        r = run_both(OpKind::kNllLoss, {&ly, &labels}, {&loss, &tw});
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "nll loss " + name(ld));
        expect_bits(r.gpu[1], r.cpu[1], "total weight " + name(ld));
        HT gl = kt::from_values(ld, {}, {0.75}), twv = r.cpu[1], glp(d, {rows, V});
        r = run_both(OpKind::kNllLossBackward, {&gl, &labels, &twv}, {&glp});
        expect_bits(r.gpu[0], r.cpu[0], "nll backward " + name(ld));
      }
    }
}

TEST(CudaKernels, ClippingAndAdamW) {
  std::mt19937 rng(20);
  HT a = kt::random_tensor(DType::kFloat32, {1000}, rng),
     b = kt::random_tensor(DType::kBFloat16, {7, 3}, rng);
  HT c = kt::random_tensor(DType::kFloat32, {1}, rng), norms(DType::kFloat32, {3}),
     s(DType::kFloat32, {1});
  Both r = run_both(OpKind::kSquaredNorm, {&a, &b, &c}, {&norms});
  expect_close(r.gpu[0], r.cpu[0], 0, 2e-7, "squared norms");
  r = run_both(OpKind::kSum, {&a}, {&s});
  expect_close(r.gpu[0], r.cpu[0], 1e-7, 1e-7, "sum");
  for (double total : {0.01, 400.0}) {
    HT t = kt::from_values(DType::kFloat32, {1}, {total});
    r = run_both(OpKind::kClipGradScale, {&t, &a, &b}, {&a, &b}, {}, {1.0});
    expect_bits(r.gpu[0], r.cpu[0], "clip fp32");
    expect_bits(r.gpu[1], r.cpu[1], "clip bf16");
  }
  for (int64_t fused : {0, 1})
    for (DType sd : {DType::kFloat32, DType::kBFloat16}) {
      const int64_t n = 1001;
      HT p = kt::random_tensor(sd, {n}, rng), g = kt::random_tensor(sd, {n}, rng),
         m = kt::random_tensor(sd, {n}, rng);
      HT v = kt::random_tensor(sd, {n}, rng, 0, 0.01), den(sd, {n});
      HT p2 = kt::random_tensor(DType::kFloat32, {3}, rng),
         g2 = kt::random_tensor(DType::kFloat32, {3}, rng);
      HT m2 = kt::random_tensor(DType::kFloat32, {3}, rng),
         v2 = kt::random_tensor(DType::kFloat32, {3}, rng, 0, 1);
      HT den2(DType::kFloat32, {3});
      std::vector<HT*> outs = {&p, &m, &v};
      if (!fused) outs.push_back(&den);
      outs.insert(outs.end(), {&p2, &m2, &v2});
      if (!fused) outs.push_back(&den2);
      r = run_both(OpKind::kAdamW, {&p, &g, &m, &v, &p2, &g2, &m2, &v2}, outs, {fused},
                   {1e-3, 0.9, 0.95, 1e-8, 0.1, 7});
      for (size_t i = 0; i < outs.size(); ++i)
        expect_bits(r.gpu[i], r.cpu[i], "adamw output " + std::to_string(i));
    }
}

// NOTE [Chunked squared norms] (rows.cu): kSquaredNorm with _foreach_norm's scratch, a block per
// 65536 elements, against the CPU's double sums: sizes around chunk edges, an empty gradient,
// more than one launch batch (70 tensors), fp32 and bf16, misaligned bases; twice, bit for bit.
// Partials are stored fp32 (2^-24 relative each, all positive): 4e-7 relative covers them and
// the output's own rounding.
TEST(CudaKernels, ChunkedSquaredNormsMatchCpu) {
  std::mt19937 rng(24);
  for (size_t misalign : {size_t{0}, size_t{4}}) {
    std::vector<HT> grads;
    std::vector<int64_t> sizes = {1, 65535, 65536, 65537, 3 * 65536 + 17, 300001, 0};
    for (int i = 0; i < 63; ++i) sizes.push_back(1 + (i * 7919) % 5000);
    for (size_t i = 0; i < sizes.size(); ++i)
      grads.push_back(
          kt::random_tensor(i % 2 ? DType::kBFloat16 : DType::kFloat32, {sizes[i]}, rng));
    std::vector<HT*> ins;
    for (HT& g : grads) ins.push_back(&g);
    HT norms(DType::kFloat32, {static_cast<int64_t>(ins.size())});
    HT scratch(DType::kFloat32, {foreach_norm_scratch_numel(sizes)});
    Both r = run_both(OpKind::kSquaredNorm, ins, {&norms, &scratch}, {}, {}, misalign);
    expect_close(r.gpu[0], r.cpu[0], 0, 4e-7, "chunked squared norms");
    const Both again = run_both(OpKind::kSquaredNorm, ins, {&norms, &scratch}, {}, {}, misalign);
    expect_bits(again.gpu[0], r.gpu[0], "chunked squared norms, run twice");
    HT small(DType::kFloat32, {foreach_norm_scratch_numel(sizes) - 1});
    const OpCall bad = kt::make_call(OpKind::kSquaredNorm, ins, {&norms, &small});
    std::vector<void*> none(ins.size(), nullptr);
    cuda::KernelContext ctx{dev().stream, dev().lt, dev().ws, dev().ws_bytes};
    EXPECT_THROW(cuda::launch_kernel(bad, none, {nullptr, nullptr}, ctx), InternalError)
        << "scratch one short";
  }
}

TEST(CudaKernels, BadLayoutsThrowBeforeLaunching) {
  HT x(DType::kFloat32, {4}), y(DType::kFloat32, {5});
  cuda::KernelContext ctx{dev().stream, dev().lt, dev().ws, dev().ws_bytes};
  const OpCall op = kt::make_call(OpKind::kAdd, {&x, &x}, {&y});
  EXPECT_THROW(cuda::launch_kernel(op, {x.data(), x.data()}, {y.data()}, ctx), InternalError);
  EXPECT_FALSE(cuda::has_kernel(OpKind::kLoadBatch));
  EXPECT_FALSE(cuda::has_kernel(OpKind::kInitParam));
  EXPECT_TRUE(cuda::has_kernel(OpKind::kAttentionBackward));
}

}  // namespace

int main(int argc, char** argv) { return ckt::run_gpu_tests(argc, argv, "cuda_kernels_test"); }
