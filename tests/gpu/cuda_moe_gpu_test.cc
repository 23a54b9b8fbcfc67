// The CUDA backend's mixture-of-experts kernels (backends/cuda/kernels/moe_*.cu, NOTE [MoE
// kernels on the GPU] in moe_plan.h) against the CPU kernels (backends/cpu/kernels/moe_*.cc)
// through cuda::launch_kernel, every kind: to the bit where the note says bits (every kind but
// softmax / sigmoid, whose expf may differ from glibc's within 2 ulp, the grouped GEMMs, whose
// fp32 sums run in another order than OpenBLAS's, and index-add, whose atomics add in any order),
// else within the tolerance stated at each check. fp32, bf16 and fp16 storage, odd sizes, empty
// experts, torchtitan's -1 padding, expert-parallel senders, misaligned bases. Exits 77 (ctest:
// skipped) without a GPU. Built here; not yet run on a GPU (docs/moe.md).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/kernel_compare.h"

namespace fullshard {
namespace {

using kc::run_both;
using kt::HT;

HT index_tensor(const std::vector<int64_t>& v) {
  HT t(DType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return t;
}
std::string shape(const char* what, DType d, int64_t a, int64_t b) {
  return std::string(what) + " " + kc::name(d) + " [" + std::to_string(a) + ", " +
         std::to_string(b) + "]";
}
// Random expert choices [N, K]: distinct experts per token, as top-k gives them.
std::vector<int64_t> choices(int64_t N, int64_t E, int64_t K, std::mt19937& rng) {
  std::vector<int64_t> v;
  std::vector<int64_t> e(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    std::iota(e.begin(), e.end(), int64_t{0});
    std::shuffle(e.begin(), e.end(), rng);
    v.insert(v.end(), e.begin(), e.begin() + K);
  }
  return v;
}

struct RouterShape {
  int64_t N, E, K;
};
constexpr RouterShape kRouter[] = {{1, 1, 1}, {7, 4, 2}, {300, 8, 2}, {1000, 128, 8}, {33, 60, 6}};

TEST(CudaMoe, SoftmaxSigmoidAndBackwardsMatchCpu) {
  std::mt19937 rng(1);
  for (DType d : kc::kFloats)
    for (auto [N, E, K] : kRouter) {
      HT x = kt::random_tensor(d, {N, E}, rng, -4, 4), y(d, {N, E});
      HT g = kt::random_tensor(d, {N, E}, rng), gx(d, {N, E});
      for (OpKind k : {OpKind::kSoftmax, OpKind::kSigmoid}) {
        const auto r = run_both(k, {&x}, {&y}, {N, E, 0});
        // expf (CUDA) against glibc's: within 2 ulp each, so a few fp32 ulp after the product.
        kc::expect_close(r.gpu[0], r.cpu[0], 1e-9, 5e-7, shape(op_kind_name(k), d, N, E));
        y = r.cpu[0];
        const OpKind b = k == OpKind::kSoftmax ? OpKind::kSoftmaxBackward : OpKind::kSigmoidBackward;
        const auto rb = run_both(b, {&g, &y}, {&gx}, {N, E, 0});
        kc::expect_bits(rb.gpu[0], rb.cpu[0], shape(op_kind_name(b), d, N, E));
      }
    }
}

TEST(CudaMoe, TopKAndBackwardMatchCpuBits) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> u(0, 9);
  for (DType d : kc::kFloats)
    for (auto [N, E, K] : kRouter) {
      HT s(d, {N, E}), v(d, {N, K}), idx(DType::kInt64, {N, K});
      for (int64_t i = 0; i < N * E; ++i) s.set(i, u(rng) == 9 ? NAN : 0.125 * u(rng));  // ties
      const auto r = run_both(OpKind::kTopK, {&s}, {&v, &idx}, {N, E, K});
      kc::expect_bits(r.gpu[0], r.cpu[0], shape("topk values", d, N, E));
      kc::expect_bits(r.gpu[1], r.cpu[1], shape("topk indices", d, N, E));
      HT g = kt::random_tensor(d, {N, K}, rng), gs(d, {N, E});
      idx = r.cpu[1];
      const auto rb = run_both(OpKind::kTopKBackward, {&g, &idx}, {&gs}, {N, E, K});
      kc::expect_bits(rb.gpu[0], rb.cpu[0], shape("topk backward", d, N, E));
    }
}

TEST(CudaMoe, RouteNormHistogramAndWeightedSumMatchCpuBits) {
  std::mt19937 rng(3);
  for (DType d : kc::kFloats)
    for (auto [N, E, K] : kRouter) {
      HT s = kt::random_tensor(d, {N, K}, rng, 0.01, 1), y(d, {N, K}), den(DType::kFloat32, {N});
      const auto r = run_both(OpKind::kRouteNorm, {&s}, {&y, &den}, {N, K, K});
      kc::expect_bits(r.gpu[0], r.cpu[0], shape("route norm", d, N, K));
      kc::expect_bits(r.gpu[1], r.cpu[1], shape("route norm denominator", d, N, K));
      den = r.cpu[1];
      HT g = kt::random_tensor(d, {N, K}, rng), gs(d, {N, K});
      const auto rb = run_both(OpKind::kRouteNormBackward, {&g, &s, &den}, {&gs}, {N, K, K});
      kc::expect_bits(rb.gpu[0], rb.cpu[0], shape("route norm backward", d, N, K));

      HT idx = index_tensor(choices(N, E, K, rng)), counts(DType::kFloat32, {E});
      idx.set(0, static_cast<double>(E));  // out of range: histc drops it
      const auto rh = run_both(OpKind::kHistogram, {&idx}, {&counts}, {N, E, K});
      kc::expect_bits(rh.gpu[0], rh.cpu[0], shape("histogram", d, N, E));

      for (int64_t D : {1, 5, 64}) {
        HT w = kt::random_tensor(DType::kFloat32, {N, K}, rng), v = kt::random_tensor(d, {N, K, D}, rng),
           o(d, {N, D});
        const auto rw = run_both(OpKind::kWeightedSum, {&w, &v}, {&o}, {N, K, K});
        kc::expect_bits(rw.gpu[0], rw.cpu[0], shape("weighted sum", d, N, D));
        HT go = kt::random_tensor(d, {N, D}, rng), gw(DType::kFloat32, {N, K}), gv(d, {N, K, D});
        const auto rwb =
            run_both(OpKind::kWeightedSumBackward, {&go, &w, &v}, {&gw, &gv}, {N, K, K});
        kc::expect_bits(rwb.gpu[0], rwb.cpu[0], shape("weighted sum backward g_w", d, N, D));
        kc::expect_bits(rwb.gpu[1], rwb.cpu[1], shape("weighted sum backward g_y", d, N, D));
      }
    }
}

TEST(CudaMoe, ArgsortAndFloorDivideMatchCpuBits) {
  std::mt19937 rng(4);
  for (int64_t n : {0, 1, 255, 256, 257, 3000, 16384}) {
    std::uniform_int_distribution<int> u(-2, 9);
    std::vector<int64_t> keys(static_cast<size_t>(n));
    for (auto& k : keys) k = u(rng);
    HT x = index_tensor(keys), y(DType::kInt64, {n}), q(DType::kInt64, {n});
    const auto r = run_both(OpKind::kArgsort, {&x}, {&y}, {n, 1, 1});
    kc::expect_bits(r.gpu[0], r.cpu[0], "argsort n " + std::to_string(n));
    const auto rq = run_both(OpKind::kFloorDivide, {&x}, {&q}, {n, 1, 3});
    kc::expect_bits(rq.gpu[0], rq.cpu[0], "floor divide n " + std::to_string(n));
  }
}

// Gather, scatter (both paths: slots and index order), pad: bit copies of any dtype, negative
// rows counting from the end, repeated indices (the later source wins), aligned and shifted bases.
TEST(CudaMoe, GatherScatterAndPadRowsMatchCpuBits) {
  std::mt19937 rng(5);
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kInt64})
    for (int64_t W : {1, 3, 8, 64})
      for (size_t misalign : {size_t{0}, size_t{4}}) {
        const int64_t R = 37, M = 90;
        std::uniform_int_distribution<int64_t> u(-R, R - 1);
        std::vector<int64_t> index(static_cast<size_t>(M));
        for (auto& i : index) i = u(rng);
        index[3] = index[70] = -1;  // torchtitan's padding: many entries on the last row
        HT idx = index_tensor(index);
        HT x = kt::random_tensor(d == DType::kInt64 ? DType::kFloat32 : d, {R, W}, rng);
        if (d == DType::kInt64) {
          HT xi(DType::kInt64, {R, W});
          for (int64_t i = 0; i < R * W; ++i) xi.set(i, static_cast<double>(i * 7 - 3));
          x = xi;
        }
        const std::string what = shape("rows", d, R, W) + " shift " + std::to_string(misalign);
        HT y(d, {M, W});
        const auto g = run_both(OpKind::kGatherRows, {&x, &idx}, {&y}, {R, W, 1}, {}, misalign);
        kc::expect_bits(g.gpu[0], g.cpu[0], "gather " + what);
        y = g.cpu[0];
        HT sc(d, {R, W});
        const auto s = run_both(OpKind::kScatterRows, {&y, &idx}, {&sc}, {R, W, 1}, {}, misalign);
        kc::expect_bits(s.gpu[0], s.cpu[0], "scatter " + what);
        for (int pad : {1, 3}) {  // pad_row's one row; slice_rows' backward pads several
          HT p(d, {R + pad, W});
          const auto pr = run_both(OpKind::kPadRow, {&x}, {&p}, {R, W, 1}, {}, misalign);
          kc::expect_bits(pr.gpu[0], pr.cpu[0], "pad row " + what);
        }
      }
}

// Index-add with atomics: the order of the adds varies, so fp32 within a few ulp of the sum's
// magnitude; a 16-bit output rounds at each add (the CPU once), so within one unit of its
// precision per contribution.
TEST(CudaMoe, IndexAddRowsMatchesCpuWithinAtomicsTolerance) {
  std::mt19937 rng(6);
  for (DType d : kc::kFloats)
    for (int64_t W : {1, 7, 128}) {
      const int64_t R = 50, M = 400;  // 8 contributions a row on average
      std::uniform_int_distribution<int64_t> u(-R, R - 1);
      std::vector<int64_t> index(static_cast<size_t>(M));
      for (auto& i : index) i = u(rng);
      HT idx = index_tensor(index), g = kt::random_tensor(d, {M, W}, rng), acc(d, {R, W});
      const auto r = run_both(OpKind::kIndexAddRows, {&g, &idx}, {&acc}, {R, W, 1});
      const double tol = d == DType::kFloat32 ? 1e-5 : 16 * kt::rel_eps(d);
      kc::expect_close(r.gpu[0], r.cpu[0], tol, tol, shape("index add", d, R, W));
    }
}

TEST(CudaMoe, PermuteIndicesMatchesCpuBits) {
  std::mt19937 rng(7);
  for (int64_t ranks : {1, 2, 8})
    for (int64_t E : {1, 4, 16, 128})
      for (int64_t align : {1, 8, 16})
        for (int64_t T : {0, 5, 3000}) {
          std::vector<int64_t> c(static_cast<size_t>(ranks * E), 0);
          std::uniform_int_distribution<int64_t> u(0, ranks * E - 1);
          for (int64_t t = 0; t < T; ++t) ++c[static_cast<size_t>(u(rng) / 2)];  // empty experts
          HT counts(DType::kFloat32, {ranks * E});
          for (int64_t i = 0; i < ranks * E; ++i) counts.set(i, static_cast<double>(c[i]));
          const int64_t P = (T + E * align + align - 1) / align * align;
          HT perm(DType::kInt64, {P}), offs(DType::kInt64, {E});
          const auto r =
              run_both(OpKind::kPermuteIndices, {&counts}, {&perm, &offs}, {T, E, align});
          const std::string what = "permute ranks " + std::to_string(ranks) + " E " +
                                   std::to_string(E) + " align " + std::to_string(align) +
                                   " T " + std::to_string(T);
          kc::expect_bits(r.gpu[0], r.cpu[0], what);
          kc::expect_bits(r.gpu[1], r.cpu[1], what + " offsets");
        }
}

// Grouped GEMMs: fp32 sums in k order against OpenBLAS's blocked order: within a few fp32 ulp of
// the inner dimension's magnitude, one unit of a 16-bit output; rows past the groups exactly 0,
// an empty group's weight gradient exactly 0; two runs give the same bits.
TEST(CudaMoe, GroupedMmAndBackwardsMatchCpu) {
  std::mt19937 rng(8);
  struct Case {
    int64_t E, P, k, n;
  };
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (const Case& c : {Case{1, 1, 1, 1}, Case{4, 70, 33, 65}, Case{8, 300, 128, 96},
                          Case{3, 129, 17, 200}}) {
      std::uniform_int_distribution<int64_t> u(0, c.P);
      std::vector<int64_t> o(static_cast<size_t>(c.E));
      for (auto& v : o) v = u(rng);
      std::sort(o.begin(), o.end());
      if (c.E > 2) o[1] = o[0];  // an empty group
      HT offs = index_tensor(o);
      HT x = kt::random_tensor(d, {c.P, c.k}, rng), w = kt::random_tensor(d, {c.E, c.n, c.k}, rng);
      HT y(d, {c.P, c.n}), g = kt::random_tensor(d, {c.P, c.n}, rng), gx(d, {c.P, c.k}),
          gw(DType::kFloat32, {c.E, c.n, c.k});
      const std::vector<int64_t> args = {c.P, c.k, c.n, c.E, o.back()};
      // fp32: a few ulp of the inner dimension's sum; bf16: the rounding of nearly equal fp32
      // sums may fall either side (2 units, and 1e-3 absolute where the sum cancels).
      const bool f32 = d == DType::kFloat32;
      const double tol_f = f32 ? 2e-6 * std::sqrt(static_cast<double>(c.k + c.n + c.P)) : 1e-3;
      const double ulps = f32 ? 1 : 2;
      const std::string what = shape("grouped mm", d, c.P, c.E);
      const auto r = run_both(OpKind::kGroupedMM, {&x, &w, &offs}, {&y}, args);
      kc::expect_close(r.gpu[0], r.cpu[0], tol_f, f32 ? tol_f : 0, what, ulps);
      const auto again = run_both(OpKind::kGroupedMM, {&x, &w, &offs}, {&y}, args);
      kc::expect_bits(again.gpu[0], r.gpu[0], what + " run to run");
      for (int64_t i = o.back() * c.n; i < c.P * c.n; ++i)
        EXPECT_EQ(r.gpu[0].get(i), 0.0) << what << " row past the groups";
      const auto rx = run_both(OpKind::kGroupedMMBackwardInput, {&g, &w, &offs}, {&gx}, args);
      kc::expect_close(rx.gpu[0], rx.cpu[0], tol_f, f32 ? tol_f : 0, what + " input grad", ulps);
      const auto rw = run_both(OpKind::kGroupedMMBackwardWeight, {&g, &x, &offs}, {&gw}, args);
      // fp32 output summed over a group's rows (up to P) of 16-bit or fp32 products.
      kc::expect_close(rw.gpu[0], rw.cpu[0], 1e-5 * std::sqrt(static_cast<double>(c.P)),
                       1e-5, what + " weight grad");
      if (c.E > 2) {
        for (int64_t i = c.n * c.k; i < 2 * c.n * c.k; ++i)
          EXPECT_EQ(rw.gpu[0].get(i), 0.0) << what << " empty group's weight gradient";
      }
    }
}

}  // namespace
}  // namespace fullshard

int main(int argc, char** argv) { return kc::run_gpu_tests(argc, argv, "cuda_moe_gpu_test"); }
