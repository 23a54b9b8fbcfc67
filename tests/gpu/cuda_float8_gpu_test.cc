// torchao's float8 kinds on the CUDA backend (backends/cuda/kernels/float8.cu, float8_dispatch.cc;
// NOTE [Float8 casts on the GPU]) against the CPU kernels (backends/cpu/kernels/float8.cc, which
// match torchao bit for bit), through cuda::launch_kernel: every cast kind and step, each
// granularity, both formats, with and without power-of-two scales, to the bit; the scaled
// matmuls through the dispatcher with their staging on sm_89 or later (the grads to the bit on
// exact sums, the output within fast accumulation's rounding). Exits 77 (ctest: skipped) without
// a GPU. Built here; not yet run on a GPU (docs/float8.md).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/runtime/float8_args.h"
#include "core/tensor/float8.h"
#include "tests/gpu/kernel_compare.h"

namespace fullshard {
namespace {

using kc::run_both;
using kt::HT;

struct Axis {
  int64_t granularity, axis;
  const char* name;
};
constexpr Axis kAxes[] = {{0, -1, "tensorwise"}, {1, -1, "per row"}, {1, 0, "per column"}};

std::vector<int64_t> iargs(const Axis& a, int64_t rows, int64_t cols, int64_t step, int target,
                           bool pow2) {
  return {a.granularity, a.axis, rows, cols, step, target, pow2 ? 1 : 0};
}
int64_t scale_numel(const Axis& a, int64_t rows, int64_t cols) {
  return a.granularity == 0 ? 1 : (a.axis == 0 ? cols : rows);
}

// Values across many binades (2^-20 .. 2^10, both signs), zeros, and row 0 / column 0 zero.
HT values(DType d, int64_t rows, int64_t cols, uint32_t seed) {
  HT t(d, {rows, cols});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-20, 10);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double v = std::ldexp(mant(rng), ex(rng)) * (rng() & 1 ? -1 : 1);
      if (i == 0 || j == 0 || rng() % 17 == 0) v = (rng() & 1) ? 0.0 : -0.0;
      t.set(i * cols + j, v);
    }
  return t;
}

std::string trace(const char* what, DType d, const Axis& a, int64_t rows, int64_t cols) {
  return std::string(what) + " " + kc::name(d) + " " + a.name + " [" + std::to_string(rows) + ", " +
         std::to_string(cols) + "]";
}

const std::pair<int64_t, int64_t> kShapes[] = {{1, 1}, {3, 1000}, {300, 17}, {2048, 33}};

TEST(CudaFloat8, AbsMatchesCpu) {
  for (DType d : kc::kFloats)
    for (auto [rows, cols] : kShapes) {
      HT x = values(d, rows, cols, 1), y(d, {rows, cols});
      const auto r =
          run_both(OpKind::kFloat8Abs, {&x}, {&y}, iargs(kAxes[0], rows, cols, 0, 0, false));
      kc::expect_bits(r.gpu[0], r.cpu[0], trace("abs", d, kAxes[0], rows, cols));
    }
}

TEST(CudaFloat8, AmaxMatchesCpu) {
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (DType od : {DType::kFloat32, d})
      for (const Axis& a : kAxes)
        for (auto [rows, cols] : kShapes) {
          HT x = values(d, rows, cols, 2), amax(od, {scale_numel(a, rows, cols)});
          const auto r =
              run_both(OpKind::kFloat8Amax, {&x}, {&amax}, iargs(a, rows, cols, 0, 0, false));
          kc::expect_bits(r.gpu[0], r.cpu[0],
                          trace("amax", d, a, rows, cols) + " -> " + kc::name(od));
        }
}

TEST(CudaFloat8, AmaxPropagatesNaN) {
  for (const Axis& a : kAxes) {
    HT x = values(DType::kFloat32, 64, 48, 3), amax(DType::kFloat32, {scale_numel(a, 64, 48)});
    x.set(5 * 48 + 7, NAN);
    const auto r = run_both(OpKind::kFloat8Amax, {&x}, {&amax}, iargs(a, 64, 48, 0, 0, false));
    for (int64_t i = 0; i < amax.numel(); ++i)
      EXPECT_EQ(std::isnan(r.gpu[0].get(i)), std::isnan(r.cpu[0].get(i))) << a.name << " " << i;
    for (int64_t i = 0; i < amax.numel(); ++i)
      if (!std::isnan(r.cpu[0].get(i))) {
        EXPECT_EQ(r.gpu[0].bits32(i), r.cpu[0].bits32(i)) << i;
      }
  }
}

// amax_to_scale: 0, subnormals, under the 1e-12 clamp, +inf, and random floats of every binade
// a scale can see, both formats, with and without power-of-two rounding; then the later steps in
// place leave the scale as it is.
TEST(CudaFloat8, ScaleMatchesCpu) {
  const int64_t n = 4096;
  std::mt19937 rng(4);
  for (DType ad : {DType::kFloat32, DType::kBFloat16})
    for (int target : {0, 1})
      for (bool pow2 : {false, true}) {
        HT amax(ad, {n}), scale(DType::kFloat32, {n});
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t bits = rng() & 0x7F7FFFFFu;  // finite, non-negative
          float v;
          std::memcpy(&v, &bits, 4);
          amax.set(i, v);
        }
        amax.set(0, 0.0);
        amax.set(1, 1e-40);
        amax.set(2, 1e-13);
        amax.set(3, INFINITY);
        const Axis a{1, -1, "per row"};
        const auto r =
            run_both(OpKind::kFloat8Scale, {&amax}, {&scale}, iargs(a, n, 1, 1, target, pow2));
        kc::expect_bits(
            r.gpu[0], r.cpu[0],
            "scale " + kc::name(ad) + " target " + std::to_string(target) + (pow2 ? " pow2" : ""));
        HT finished = r.cpu[0];
        const auto later = run_both(OpKind::kFloat8Scale, {&finished}, {&finished},
                                    iargs(a, n, 1, 2, target, pow2), {}, 0, true);
        kc::expect_bits(later.gpu[0], r.cpu[0], "scale step 2 in place");
      }
}

// The eager cast's steps one by one (each from the CPU's previous output) and the compiled
// cast, every granularity and format.
TEST(CudaFloat8, CastStepsMatchCpu) {
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (const Axis& a : kAxes)
      for (int target : {0, 1})
        for (bool pow2 : {false, true})
          for (auto [rows, cols] : kShapes) {
            const std::string what = trace("cast", d, a, rows, cols) + " target " +
                                     std::to_string(target) + (pow2 ? " pow2" : "");
            SCOPED_TRACE(what);
            const DType fp8 = target == 1 ? DType::kFloat8E5M2 : DType::kFloat8E4M3FN;
            const int64_t s = scale_numel(a, rows, cols);
            HT x = values(d, rows, cols, 5), amax(DType::kFloat32, {s});
            kt::run(OpKind::kFloat8Amax, {&x}, {&amax}, iargs(a, rows, cols, 0, 0, false));
            // Compiled: (x, amax) -> (x8, scale).
            HT x8(fp8, {rows, cols}), scale(DType::kFloat32, {s});
            const auto c = run_both(OpKind::kFloat8Cast, {&x, &amax}, {&x8, &scale},
                                    iargs(a, rows, cols, 0, target, pow2));
            kc::expect_bits(c.gpu[0], c.cpu[0], "compiled codes");
            kc::expect_bits(c.gpu[1], c.cpu[1], "compiled scale");
            // Eager: to_fp32, * scale, clamp, to_float8.
            HT cur = x;
            if (d != DType::kFloat32) {
              HT x32(DType::kFloat32, {rows, cols});
              const auto r1 = run_both(OpKind::kFloat8Cast, {&cur}, {&x32},
                                       iargs(a, rows, cols, 1, target, pow2));
              kc::expect_bits(r1.gpu[0], r1.cpu[0], "step 1");
              cur = r1.cpu[0];
            }
            HT sc = c.cpu[1], scaled(DType::kFloat32, {rows, cols});
            const auto r2 = run_both(OpKind::kFloat8Cast, {&cur, &sc}, {&scaled},
                                     iargs(a, rows, cols, 2, target, pow2));
            kc::expect_bits(r2.gpu[0], r2.cpu[0], "step 2");
            HT in3 = r2.cpu[0], clamped(DType::kFloat32, {rows, cols});
            // Out of range and NaN reach the clamp and the conversion.
            if (rows * cols > 3) in3.set(1, 1e9), in3.set(2, -1e9), in3.set(3, NAN);
            const auto r3 = run_both(OpKind::kFloat8Cast, {&in3}, {&clamped},
                                     iargs(a, rows, cols, 3, target, pow2));
            kc::expect_bits(r3.gpu[0], r3.cpu[0], "step 3");
            HT in4 = r3.cpu[0], codes(fp8, {rows, cols});
            const auto r4 = run_both(OpKind::kFloat8Cast, {&in4}, {&codes},
                                     iargs(a, rows, cols, 4, target, pow2));
            kc::expect_bits(r4.gpu[0], r4.cpu[0], "step 4");
          }
}

// The scaled matmuls through the dispatcher with their staging (sm_89 or later): codes of
// magnitude 2^-3..2^3 and power-of-two scales, so every fp32 sum is exact.
TEST(CudaFloat8, ScaledMatmulsThroughTheDispatcher) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major * 10 + prop.minor < 89) GTEST_SKIP() << "float8 GEMMs need sm_89 or later";
  const int64_t M = 32, K = 48, N = 64;
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(0.125f, 7.9f);
  auto codes = [&](DType d, Shape s) {
    HT t(d, std::move(s));
    const Float8Format& f = d == DType::kFloat8E5M2 ? kFloat8E5M2 : kFloat8E4M3FN;
    auto* c = static_cast<uint8_t*>(t.data());
    for (int64_t i = 0; i < t.numel(); ++i)
      c[i] = float_to_float8((rng() & 1 ? -1.0f : 1.0f) * u(rng), f, true);
    return t;
  };
  for (OpKind k :
       {OpKind::kScaledMM, OpKind::kScaledMMBackwardInput, OpKind::kScaledMMBackwardWeight})
    for (DType out : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(std::string(op_kind_name(k)) + " -> " + kc::name(out));
      const DType pa = k == OpKind::kScaledMM ? DType::kFloat8E4M3FN : DType::kFloat8E5M2;
      Shape as{M, K}, bs{N, K}, ys{M, N};
      if (k == OpKind::kScaledMMBackwardInput) as = {M, N}, ys = {M, K};
      if (k == OpKind::kScaledMMBackwardWeight) as = {M, N}, bs = {M, K}, ys = {N, K};
      HT a = codes(pa, as), b = codes(DType::kFloat8E4M3FN, bs), sa(DType::kFloat32, {1}),
         sb(DType::kFloat32, {1}), y(out, ys);
      sa.set(0, 8.0);
      sb.set(0, 0.25);
      const auto r = run_both(k, {&a, &b, &sa, &sb}, {&y}, {M, K, N});
      if (k == OpKind::kScaledMM)  // fast accumulation (torchao's output GEMM)
        kc::expect_close(r.gpu[0], r.cpu[0], 0, 0x1p-10, "output");
      else
        kc::expect_bits(r.gpu[0], r.cpu[0], "grad");
    }
}

}  // namespace
}  // namespace fullshard

int main(int argc, char** argv) { return kc::run_gpu_tests(argc, argv, "cuda_float8_gpu_test"); }
