// The tensor-parallel CUDA kernels (backends/cuda/kernels/tensor_parallel.h) and the
// vocab-parallel embedding against the CPU reference kernels on the same random inputs, every
// float dtype each kind takes, odd sizes, in-place where the CPU kernel allows it; tolerances as
// docs/cuda-kernels.md states them. Needs a GPU: exits 77 (ctest: skipped) without one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>

#include "tests/gpu/kernel_compare.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace fullshard;
using namespace kernel_compare;
using kt::HT;

using Sizes = std::pair<int64_t, int64_t>;  // rows, D
const Sizes kRows[] = {{1, 1}, {7, 13}, {1000, 3}, {3, 5000}, {2, 50257}};
// expect_close's `ulps`: one unit of a 16-bit output's last place (a rounding that flips), none
// for fp32 (its tolerance is the rtol given).
double ulps16(DType out) { return out == DType::kFloat32 ? 0 : 1; }

TEST(CudaTpKernels, TransposeBlocksIsBitExact) {
  std::mt19937 rng(31);
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kUInt8})
    for (auto [a, b, inner] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                               {2, 3, 5},
                               {3, 7, 33},
                               {8, 2, 2048},
                               {2, 513, 257}})
      for (size_t mis : {size_t{0}, size_t{2}, size_t{d == DType::kUInt8 ? 1u : 8u}}) {
        HT x(d, {a, b, inner}), y(d, {b, a, inner});
        for (int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(rng() % 200) - 100);
        Both r = run_both(OpKind::kTransposeBlocks, {&x}, {&y}, {a, b, inner}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0],
                    "transpose " + std::string(kt::dtype_str(d)) + " " + std::to_string(a) + "x" +
                        std::to_string(b) + "x" + std::to_string(inner) + " misaligned " +
                        std::to_string(mis));
      }
}

TEST(CudaTpKernels, RowMaxIsBitExact) {
  std::mt19937 rng(32);
  for (DType d : kFloats)
    for (DType o : {d, DType::kFloat32})
      for (auto [rows, D] : kRows) {
        HT x = kt::random_tensor(d, {rows, D}, rng, -30, 30), y(o, {rows});
        Both r = run_both(OpKind::kRowMax, {&x}, {&y}, {D});
        expect_bits(r.gpu[0], r.cpu[0], "row max " + name(d) + " D " + std::to_string(D));
      }
}

// Sums in double on both sides, in different orders: the float result may differ by the
// rounding of a double, one unit in the last place of the output dtype at most.
TEST(CudaTpKernels, SumLastDim) {
  std::mt19937 rng(33);
  for (DType d : kFloats)
    for (DType o : {d, DType::kFloat32})
      for (auto [rows, D] : kRows)
        for (std::vector<double> f :
             {std::vector<double>{}, std::vector<double>{1.0 / static_cast<double>(D)}}) {
          HT x = kt::random_tensor(d, {rows, D}, rng, -2, 2), y(o, {rows});
          Both r = run_both(OpKind::kSumLastDim, {&x}, {&y}, {D}, f);
          expect_close(r.gpu[0], r.cpu[0], 1e-12 * static_cast<double>(D), 2.4e-7,
                       "sum last dim " + name(d) + "->" + name(o) + " D " + std::to_string(D),
                       ulps16(o));
        }
}

TEST(CudaTpKernels, SubRowIsBitExactAlsoInPlace) {
  std::mt19937 rng(34);
  for (DType d : kFloats)
    for (DType db : {d, DType::kFloat32})
      for (auto [rows, D] : kRows) {
        HT a = kt::random_tensor(d, {rows, D}, rng, -30, 30),
           b = kt::random_tensor(db, {rows}, rng, -30, 30);
        HT y(DType::kFloat32, {rows, D});
        Both r = run_both(OpKind::kSubRow, {&a, &b}, {&y}, {D});
        expect_bits(r.gpu[0], r.cpu[0], "sub row " + name(d) + " - " + name(db));
        r = run_both(OpKind::kSubRow, {&a, &b}, {&a}, {D});  // the CPU kernel allows out == a
        expect_bits(r.gpu[0], r.cpu[0], "sub row in place " + name(d));
      }
}

// expf / logf are at most 2 / 1 ulp from the exact result, glibc's within 1: a few fp32 ulp
// apart, or one ulp of bf16 / fp16 after rounding.
TEST(CudaTpKernels, ExpAndLog) {
  std::mt19937 rng(35);
  for (DType d : kFloats)
    for (DType o : kFloats)
      for (int64_t n : {1, 7, 4099}) {
        HT x = kt::random_tensor(d, {n}, rng, -8, 4),
           lx = kt::random_tensor(d, {n}, rng, 1e-3, 100), y(o, {n});
        Both r = run_both(OpKind::kExp, {&x}, {&y});
        expect_close(r.gpu[0], r.cpu[0], 0, 1e-6, "exp " + name(d) + "->" + name(o), ulps16(o));
        r = run_both(OpKind::kLog, {&lx}, {&y});
        expect_close(r.gpu[0], r.cpu[0], 1e-7, 1e-6, "log " + name(d) + "->" + name(o), ulps16(o));
        if (d != o) continue;
        r = run_both(OpKind::kExp, {&x}, {&x});
        expect_close(r.gpu[0], r.cpu[0], 0, 1e-6, "exp in place " + name(d), ulps16(d));
        r = run_both(OpKind::kLog, {&lx}, {&lx});
        expect_close(r.gpu[0], r.cpu[0], 1e-7, 1e-6, "log in place " + name(d), ulps16(d));
      }
}

// Targets inside this shard's columns [start, start + D), below and above them, and the
// ignore index (-100): the forward picks -lp where the column is local, 0 elsewhere.
HT targets(int64_t rows, int64_t D, int64_t start, std::mt19937& rng) {
  HT t(DType::kInt64, {rows});
  std::uniform_int_distribution<int64_t> u(0, 4 * D - 1);
  for (int64_t r = 0; r < rows; ++r) t.set(r, r % 5 == 4 ? -100.0 : static_cast<double>(u(rng)));
  if (rows > 1) t.set(0, static_cast<double>(start));  // the first and last columns of the shard
  if (rows > 2) t.set(1, static_cast<double>(start + D - 1));
  return t;
}

TEST(CudaTpKernels, NllVocabParallelIsBitExact) {
  std::mt19937 rng(36);
  for (DType d : kFloats)
    for (DType o : {d, DType::kFloat32})
      for (auto [rows, D] : kRows)
        for (int64_t start : {int64_t{0}, D, 2 * D}) {
          HT lp = kt::random_tensor(d, {rows, D}, rng, -12, 0), t = targets(rows, D, start, rng),
             y(o, {rows});
          Both r = run_both(OpKind::kNllVocabParallel, {&lp, &t}, {&y}, {D, start}, {});
          expect_bits(r.gpu[0], r.cpu[0],
                      "nll vocab parallel " + name(d) + " start " + std::to_string(start));
        }
}

// out = (g f) (exp(lp) - onehot): the exp differs by a few fp32 ulp (<= 4e-7 |g f| absolute,
// also where exp(lp) - 1 cancels), then one rounding to a 16-bit output.
TEST(CudaTpKernels, NllVocabParallelBackward) {
  std::mt19937 rng(37);
  for (DType d : kFloats)
    for (DType dg : {DType::kFloat32, DType::kBFloat16})
      for (auto [rows, D] : kRows)
        for (int64_t start : {int64_t{0}, D}) {
          HT lp = kt::random_tensor(d, {rows, D}, rng, -12, 0), t = targets(rows, D, start, rng);
          HT g = kt::from_values(dg, {}, {0.75}), y(d, {rows, D});
          const double f = 1.0 / static_cast<double>(rows);
          Both r =
              run_both(OpKind::kNllVocabParallelBackward, {&g, &lp, &t}, {&y}, {D, start}, {f});
          expect_close(r.gpu[0], r.cpu[0], 4e-7 * 0.75 * f, 1e-6,
                       "nll vocab parallel backward " + name(d) + " g " + name(dg), ulps16(d));
        }
}

// The narrow copy writes n columns of each block, scaled; every other output element keeps its
// bytes (0xFF from run_both).
TEST(CudaTpKernels, NarrowCopyIsBitExactAndWritesOnlyItsColumns) {
  std::mt19937 rng(38);
  struct Case {
    int64_t blocks, n, iw, io, ow, oo;
  };
  for (DType d : kFloats)
    for (DType o : kFloats)
      for (const Case c : {Case{1, 1, 1, 0, 1, 0}, Case{3, 5, 11, 6, 5, 0}, Case{7, 4, 4, 0, 9, 3},
                           Case{1000, 64, 128, 64, 64, 0}, Case{5, 3, 8, 2, 10, 7}})
        for (double f : {1.0, -1.0, 0.3}) {
          HT x = kt::random_tensor(d, {c.blocks, c.iw}, rng, -4, 4), y(o, {c.blocks, c.ow});
          Both r = run_both(OpKind::kNarrowCopy, {&x}, {&y}, {c.n, c.iw, c.io, c.ow, c.oo}, {f});
          const size_t es = dtype_size(o);
          const auto* gb = static_cast<const unsigned char*>(r.gpu[0].data());
          const auto* cb = static_cast<const unsigned char*>(r.cpu[0].data());
          int bad = 0;
          for (int64_t b = 0; b < c.blocks; ++b)
            for (int64_t i = 0; i < c.ow; ++i) {
              const size_t at = static_cast<size_t>(b * c.ow + i) * es;
              const bool written = i >= c.oo && i < c.oo + c.n;
              bool ok = true;
              for (size_t k = 0; k < es; ++k)
                ok = ok && gb[at + k] == (written ? cb[at + k] : 0xFF);
              bad += ok ? 0 : 1;
            }
          EXPECT_EQ(bad, 0) << "narrow copy " << name(d) << "->" << name(o) << " factor " << f
                            << ", " << c.blocks << " blocks of " << c.n;
        }
}

// The vocab-parallel embedding (iargs[0] = the shard's first row): ids outside the shard give
// zero rows and no gradient, as embedding.cc.
TEST(CudaTpKernels, VocabParallelEmbeddingIsBitExact) {
  std::mt19937 rng(39);
  for (DType d : kFloats)
    for (auto [n, V, D] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {37, 11, 7}, {300, 50, 96}})
      for (int64_t start : {int64_t{0}, V, 3 * V}) {
        HT ids(DType::kInt64, {n});
        std::uniform_int_distribution<int64_t> u(0, 4 * V - 1);
        for (int64_t t = 0; t < n; ++t) ids.set(t, static_cast<double>(u(rng)));
        ids.set(0, static_cast<double>(start));  // at least one id inside the shard
        HT w = kt::random_tensor(d, {V, D}, rng), y(d, {n, D});
        Both r = run_both(OpKind::kEmbedding, {&ids, &w}, {&y}, {start});
        expect_bits(r.gpu[0], r.cpu[0],
                    "vocab-parallel embedding " + name(d) + " start " + std::to_string(start));
        HT g = kt::random_tensor(d, {n, D}, rng), gw(d, {V, D});
        r = run_both(OpKind::kEmbeddingBackward, {&g, &ids}, {&gw}, {start});
        expect_bits(r.gpu[0], r.cpu[0], "vocab-parallel embedding backward " + name(d));
      }
}

TEST(CudaTpKernels, AsyncTpKindsStayRefused) {
  HT a(DType::kBFloat16, {4, 8}), w(DType::kBFloat16, {8, 8}), g(DType::kBFloat16, {8, 8}),
      c(DType::kBFloat16, {8, 8});
  cuda::KernelContext ctx{dev().stream, dev().lt, dev().ws, dev().ws_bytes};
  const OpCall op = kt::make_call(OpKind::kAllGatherMatmul, {&a, &w}, {&g, &c}, {4, 8, 8, 2});
  EXPECT_THROW(cuda::launch_kernel(op, {a.data(), w.data()}, {g.data(), c.data()}, ctx),
               InternalError);
}

}  // namespace

int main(int argc, char** argv) {
  return kernel_compare::run_gpu_tests(argc, argv, "cuda_kernels_tp_test");
}
