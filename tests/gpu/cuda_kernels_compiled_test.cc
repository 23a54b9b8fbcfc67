// The CUDA kernels of torch.compile's fused regions (backends/cuda/kernels/compiled.cu) against
// the CPU kernels (backends/cpu/kernels/compiled.cc) on the same inputs, with the tolerances of
// docs/cuda-kernels.md: every float dtype and mixed ones, odd hidden sizes, misaligned bases (the
// scalar paths of the vectorised kernels) and the in-place forms the block emits. Needs a GPU:
// exits 77 (ctest: skipped) when cudaGetDeviceCount fails or finds none.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/gpu/kernel_compare.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace fullshard;
using namespace kc;
using kt::HT;

const DType kFloats[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
std::string name(DType d) { return kt::dtype_str(d); }

// Rows x hidden: one element, odd sizes, a row over several 128-thread passes, more rows than
// the column sums' 64-row chunks (several chunks: gx's storage holds their partials), and rows
// above one 1024-thread block pass.
const std::pair<int64_t, int64_t> kShapes[] = {{1, 1},    {5, 7},    {300, 768},
                                               {3, 2050}, {2, 4099}, {129, 33}};

TEST(CudaCompiledKernels, RmsNormIsTheEagerKernel) {
  std::mt19937 rng(31);
  for (DType d : kFloats)
    for (auto [rows, D] : kShapes) {
      const std::string what = name(d) + " " + std::to_string(rows) + "x" + std::to_string(D);
      HT x = kt::random_tensor(d, {rows, D}, rng, -2, 2),
         w = kt::random_tensor(d, {D}, rng, 0.5, 1.5);
      HT y(d, {rows, D}), rstd(DType::kFloat32, {rows});
      const Both c = run_both(OpKind::kCompiledRMSNorm, {&x, &w}, {&y, &rstd}, {}, {1e-5});
      expect_close(c.gpu[1], c.cpu[1], 0, 1e-6, "rstd " + what);
      expect_close(c.gpu[0], c.cpu[0], 1e-6, 2e-6, "y " + what);
      // Without a residual the region is the eager RMSNorm: the same kernel, the same bits.
      const Both e = run_both(OpKind::kRMSNorm, {&x, &w}, {&y, &rstd}, {}, {1e-5});
      expect_bits(c.gpu[0], e.gpu[0], "compiled vs eager y " + what);
      expect_bits(c.gpu[1], e.gpu[1], "compiled vs eager rstd " + what);
    }
}

TEST(CudaCompiledKernels, AddRmsNorm) {
  std::mt19937 rng(32);
  for (DType d : kFloats)
    for (DType da : {d, DType::kFloat32})
      for (auto [rows, D] : kShapes) {
        const std::string what =
            name(d) + "+" + name(da) + " " + std::to_string(rows) + "x" + std::to_string(D);
        HT x = kt::random_tensor(d, {rows, D}, rng, -2, 2),
           a = kt::random_tensor(da, {rows, D}, rng);
        HT w = kt::random_tensor(d, {D}, rng, 0.5, 1.5), y(d, {rows, D}),
           rstd(DType::kFloat32, {rows});
        for (size_t mis : {size_t{0}, size_t{2}}) {
          const Both r =
              run_both(OpKind::kCompiledAddRMSNorm, {&x, &a, &w}, {&y, &rstd}, {}, {1e-6}, mis);
          expect_close(r.gpu[1], r.cpu[1], 0, 1e-6, "rstd " + what);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 2e-6, "y " + what);
        }
      }
}

// Every form of the backward (iargs {has_a, has_g_h}), gx in the storage dtype and in fp32, and
// gx written over g_h: then gx overlaps an input, so the weight gradient's chunk partials cannot
// use its storage (one chunk instead).
TEST(CudaCompiledKernels, RmsNormBackward) {
  std::mt19937 rng(33);
  for (DType d : kFloats)
    for (auto [rows, D] : kShapes)
      for (int has_a : {0, 1})
        for (int has_gh : {0, 1}) {
          const std::string what = name(d) + " " + std::to_string(rows) + "x" + std::to_string(D) +
                                   " a " + std::to_string(has_a) + " g_h " + std::to_string(has_gh);
          HT x = kt::random_tensor(d, {rows, D}, rng, -2, 2),
             a = kt::random_tensor(d, {rows, D}, rng);
          HT w = kt::random_tensor(d, {D}, rng, 0.5, 1.5), y(d, {rows, D}),
             rstd(DType::kFloat32, {rows});
          if (has_a)
            kt::run(OpKind::kCompiledAddRMSNorm, {&x, &a, &w}, {&y, &rstd}, {}, {1e-5});
          else
            kt::run(OpKind::kCompiledRMSNorm, {&x, &w}, {&y, &rstd}, {}, {1e-5});
          HT g = kt::random_tensor(d, {rows, D}, rng), gh = kt::random_tensor(d, {rows, D}, rng);
          std::vector<HT*> in = {&g, &x, &rstd, &w};
          if (has_a) in.push_back(&a);
          if (has_gh) in.push_back(&gh);
          for (DType dgx : {d, DType::kFloat32}) {
            HT gx(dgx, {rows, D}), gw(d, {D});
            const Both r =
                run_both(OpKind::kCompiledRMSNormBackward, in, {&gx, &gw}, {has_a, has_gh});
            expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "gx " + what + " gx " + name(dgx));
            expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "gw " + what);
          }
          if (!has_gh) continue;
          HT gw(d, {D});
          const Both r =
              run_both(OpKind::kCompiledRMSNormBackward, in, {&gh, &gw}, {has_a, has_gh});
          expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "gx over g_h " + what);
          expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "gw (gx over g_h) " + what);
        }
}

// q and k of different widths (GQA) in one launch, in place as the block runs it and into new
// tensors as under op-level selective checkpointing (misaligned), then the backward; both
// pairings, plain and Llama 3.1-scaled frequencies (which the eager CUDA RoPE refuses).
TEST(CudaCompiledKernels, RoPE) {
  std::mt19937 rng(34);
  const std::vector<double> plain = {500000.0}, llama3 = {500000.0, 8.0, 1.0, 4.0, 64.0};
  for (DType d : kFloats)
    for (int adjacent : {0, 1})
      for (const auto& fargs : {plain, llama3})
        for (auto [S, hq, hk, hd] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 1, 1, 2},
                                     {37, 3, 1, 8},
                                     {129, 4, 2, 64},
                                     {33, 2, 1, 128}}) {
          const std::string what = name(d) + " adjacent " + std::to_string(adjacent) + " fargs " +
                                   std::to_string(fargs.size()) + " S " + std::to_string(S) +
                                   " hd " + std::to_string(hd);
          const std::vector<int64_t> iargs = {hd, adjacent};
          HT q = kt::random_tensor(d, {2, S, hq * hd}, rng),
             k = kt::random_tensor(d, {2, S, hk * hd}, rng);
          // cos / sin of the same fp32 angle: glibc's cosf / sinf against the double ones rounded
          // to fp32, which differ by an ulp now and then.
          Both r = run_both(OpKind::kCompiledRoPE, {&q, &k}, {&q, &k}, iargs, fargs);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "q in place " + what);
          expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "k in place " + what);
          HT qo(d, {2, S, hq * hd}), ko(d, {2, S, hk * hd});
          r = run_both(OpKind::kCompiledRoPE, {&q, &k}, {&qo, &ko}, iargs, fargs, 2);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "q " + what);
          expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "k " + what);
          HT g = kt::random_tensor(d, {2, S, hk * hd}, rng), gx(DType::kFloat32, {2, S, hk * hd});
          r = run_both(OpKind::kCompiledRoPEBackward, {&g}, {&gx}, iargs, fargs);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "backward " + what);
          r = run_both(OpKind::kCompiledRoPEBackward, {&g}, {&g}, iargs, fargs);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "backward in place " + what);
        }
}

// Sizes around the 8-element vectors (n % 8 tails), aligned (vectorised) and 4 bytes off (scalar).
const int64_t kSizes[] = {1, 7, 8, 9, 4099, 10000};
const size_t kMisalign[] = {0, 4};

TEST(CudaCompiledKernels, SiluMulForwardAndBackward) {
  std::mt19937 rng(35);
  for (DType d : kFloats)
    for (DType db : {d, DType::kFloat32})
      for (int64_t n : kSizes)
        for (size_t mis : kMisalign) {
          const std::string what = name(d) + "/" + name(db) + " n " + std::to_string(n) +
                                   " misalign " + std::to_string(mis);
          HT a = kt::random_tensor(d, {n}, rng, -4, 4), b = kt::random_tensor(db, {n}, rng, -2, 2),
             y(d, {n});
          // expf on the GPU is within 2 ulp of glibc's: a few fp32 ulp, or one ulp of bf16 / fp16.
          Both r = run_both(OpKind::kCompiledSiluMul, {&a, &b}, {&y}, {}, {}, mis);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 4e-6, "silu_mul " + what);
          HT g = kt::random_tensor(d, {n}, rng, -2, 2), ga(d, {n}), gb(db, {n});
          r = run_both(OpKind::kCompiledSiluMulBackward, {&g, &a, &b}, {&ga, &gb}, {}, {}, mis);
          expect_close(r.gpu[0], r.cpu[0], 1e-6, 4e-6, "g_a " + what);
          expect_close(r.gpu[1], r.cpu[1], 1e-6, 4e-6, "g_b " + what);
        }
}

TEST(CudaCompiledKernels, ResidualAddIsBitExact) {
  std::mt19937 rng(36);
  for (DType d : kFloats)
    for (DType da : {d, DType::kFloat32})
      for (int64_t n : kSizes)
        for (size_t mis : kMisalign) {
          const std::string what = name(d) + "/" + name(da) + " n " + std::to_string(n) +
                                   " misalign " + std::to_string(mis);
          HT x = kt::random_tensor(d, {n}, rng), a = kt::random_tensor(da, {n}, rng);
          HT f = kt::random_tensor(d, {n}, rng), y(d, {n});
          Both r = run_both(OpKind::kCompiledResidualAdd, {&x, &a, &f}, {&f}, {}, {},
                            mis);  // over f, as the block
          expect_bits(r.gpu[0], r.cpu[0], "residual add in place " + what);
          r = run_both(OpKind::kCompiledResidualAdd, {&x, &a, &f}, {&y}, {}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "residual add " + what);
        }
}

}  // namespace

int main(int argc, char** argv) {
  return kernel_compare::run_gpu_tests(argc, argv, "cuda_kernels_compiled_test");
}
