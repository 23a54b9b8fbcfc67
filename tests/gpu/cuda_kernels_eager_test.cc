// The eager decompositions' CUDA kernels (backends/cuda/kernels/eager.cu; model.implementation,
// docs/ops.md "Implementation variants") against the CPU kernels (backends/cpu/kernels/eager.cc,
// rope.cc) on the same random inputs, with the tolerances of docs/cuda-kernels.md: every kind,
// every float storage dtype (and the mixed input / output dtypes the eager chains run), odd sizes
// beside multiples of 8, device bases shifted by 4 bytes (the scalar paths beside the 16-byte
// vector ones) and in-place uses. Harness: kernel_compare.h. Needs a GPU: exits 77 (ctest:
// skipped) when cudaGetDeviceCount fails or finds none.
#include <random>

#include "tests/gpu/kernel_compare.h"

namespace {

using namespace fullshard;
using namespace ckt;
using kt::HT;

const size_t kMisalign[] = {0, 4};
std::string shift(size_t mis) { return mis ? " (bases +" + std::to_string(mis) + " B)" : ""; }

// One unit in the last place relative to a value at the bottom of its binade (the largest ratio):
// a difference of n ulps is within n * ulp(d) * |value|.
double ulp(DType d) {
  return d == DType::kBFloat16 ? 0x1p-7 : d == DType::kFloat16 ? 0x1p-10 : 0x1p-23;
}
void expect_ulps(const HT& gpu, const HT& cpu, double n_ulps, double atol,
                 const std::string& what) {
  expect_close(gpu, cpu, atol, n_ulps * ulp(cpu.meta.dtype), what, 0);
}

// A quiet NaN with a payload in element 0: a bit copy keeps it, a round trip through fp32 may not.
void plant_nan(HT& t) {
  if (t.meta.dtype == DType::kFloat32) {
    const uint32_t bits = 0x7fc00123u;
    std::memcpy(t.data(), &bits, 4);
  } else {
    const uint16_t bits = t.meta.dtype == DType::kBFloat16 ? 0x7fc1 : 0x7e01;
    std::memcpy(t.data(), &bits, 2);
  }
}

// kPowScalar (exponents 1, 2, 3: the CPU's exact cases, the eager RMSNorm's), kAddScalar, kRsqrt;
// the eager chain runs them on fp32 (x.float()); other dtypes and a cast on the way out too.
TEST(CudaKernelsEager, PowAddRsqrt) {
  std::mt19937 rng(31);
  for (DType in : kFloats)
    for (DType out : {in, DType::kFloat32})
      for (int64_t n : {1, 7, 8, 4096, 4099})
        for (size_t mis : kMisalign) {
          const std::string what =
              name(in) + "->" + name(out) + " n=" + std::to_string(n) + shift(mis);
          HT x = kt::random_tensor(in, {n}, rng, -3, 3),
             pos = kt::random_tensor(in, {n}, rng, 1e-3, 4), y(out, {n});
          for (double p : {1.0, 2.0, 3.0}) {
            Both r = run_both(OpKind::kPowScalar, {&x}, {&y}, {}, {p}, mis);
            expect_bits(r.gpu[0], r.cpu[0], "pow " + std::to_string(p) + " " + what);
          }
          Both r = run_both(OpKind::kAddScalar, {&x}, {&y}, {}, {1e-5}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "add_scalar " + what);
          r = run_both(OpKind::kRsqrt, {&pos}, {&y}, {}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "rsqrt " + what);
          // Other exponents: pow in double rounded once on the GPU, glibc's powf (< 1 ulp from
          // the exact power) on the CPU.
          for (double p : {0.5, -1.5, 2.5}) {
            r = run_both(OpKind::kPowScalar, {&pos}, {&y}, {}, {p}, mis);
            expect_ulps(r.gpu[0], r.cpu[0], 1, 0, "pow " + std::to_string(p) + " " + what);
          }
          if (in == out) {  // in place, as the CPU kernels allow
            r = run_both(OpKind::kAddScalar, {&x}, {&x}, {}, {-0.25}, mis);
            expect_bits(r.gpu[0], r.cpu[0], "add_scalar in place " + what);
            r = run_both(OpKind::kPowScalar, {&x}, {&x}, {}, {2.0}, mis);
            expect_bits(r.gpu[0], r.cpu[0], "pow 2 in place " + what);
          }
        }
}

struct BcastCase {
  int64_t rows, D, hd;
};

// Per row (x.float() * rstd [M, 1] fp32), per column (* weight [D]) and per head (q * cos
// [B, S, hd] over H heads): fp32 products rounded once, bit for bit.
TEST(CudaKernelsEager, MulBroadcastIsBitExact) {
  std::mt19937 rng(32);
  struct Dtypes {
    DType a, b, y;
  };
  for (Dtypes t : {Dtypes{DType::kFloat32, DType::kFloat32, DType::kFloat32},
                   Dtypes{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16},
                   Dtypes{DType::kFloat16, DType::kFloat16, DType::kFloat16},
                   Dtypes{DType::kFloat32, DType::kBFloat16, DType::kBFloat16},
                   Dtypes{DType::kBFloat16, DType::kFloat32, DType::kFloat32}})
    // hd 4 with D 8: vectors per row / column but not per head.
    for (BcastCase c :
         {BcastCase{1, 1, 1}, {5, 7, 7}, {3, 8, 4}, {33, 96, 32}, {74, 256, 64}, {300, 4096, 128}})
      for (size_t mis : kMisalign) {
        const std::string what = name(t.a) + "*" + name(t.b) + "->" + name(t.y) + " " +
                                 std::to_string(c.rows) + "x" + std::to_string(c.D) +
                                 " hd=" + std::to_string(c.hd) + shift(mis);
        HT a = kt::random_tensor(t.a, {c.rows, c.D}, rng, -2, 2), y(t.y, {c.rows, c.D});
        HT per_row = kt::random_tensor(t.b, {c.rows, 1}, rng, 0.1, 3),
           per_col = kt::random_tensor(t.b, {c.D}, rng);
        HT per_head = kt::random_tensor(t.b, {c.rows, c.hd}, rng);
        Both r = run_both(OpKind::kMulBroadcast, {&a, &per_row}, {&y}, {0, c.D}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "per row " + what);
        r = run_both(OpKind::kMulBroadcast, {&a, &per_col}, {&y}, {1, c.D}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "per column " + what);
        r = run_both(OpKind::kMulBroadcast, {&a, &per_head}, {&y}, {2, c.D, c.hd}, {}, mis);
        expect_bits(r.gpu[0], r.cpu[0], "per head " + what);
        if (t.a == t.y) {
          r = run_both(OpKind::kMulBroadcast, {&a, &per_col}, {&a}, {1, c.D}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "per column in place " + what);
        }
      }
}

// mean(-1) (scale 1/D), sum_to_size [M, 1] (scale 1) and sum_to_size [D]: double sums on both
// sides in different orders (a block reduction vs a sequential loop), each rounded to fp32 and
// then to the output dtype. The double sums differ by at most n * 2^-53 * sum |x| (< 3e-9 here),
// which moves the rounded result by at most one ulp.
TEST(CudaKernelsEager, SumsWithinAnUlp) {
  std::mt19937 rng(33);
  for (DType in : kFloats)
    for (DType out : {in, DType::kFloat32})
      for (auto [rows, D] :
           {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {7, 8}, {1000, 33}, {300, 4096}, {3, 5001}})
        for (size_t mis : kMisalign) {
          const std::string what = name(in) + "->" + name(out) + " " + std::to_string(rows) + "x" +
                                   std::to_string(D) + shift(mis);
          HT x = kt::random_tensor(in, {rows, D}, rng), rs(out, {rows, 1}), cs(out, {D});
          Both r =
              run_both(OpKind::kSumLastDim, {&x}, {&rs}, {D}, {1.0 / static_cast<double>(D)}, mis);
          expect_ulps(r.gpu[0], r.cpu[0], 1, 1e-8, "mean(-1) " + what);
          r = run_both(OpKind::kSumLastDim, {&x}, {&rs}, {D}, {}, mis);
          expect_ulps(r.gpu[0], r.cpu[0], 1, 1e-8, "sum_to_size [M, 1] " + what);
          r = run_both(OpKind::kSumLeadingDims, {&x}, {&cs}, {D}, {}, mis);
          expect_ulps(r.gpu[0], r.cpu[0], 1, 1e-8, "sum_to_size [D] " + what);
        }
}

// mean's backward: grad [M, 1] expanded over D and scaled by 1/D.
TEST(CudaKernelsEager, ExpandLastDimIsBitExact) {
  std::mt19937 rng(34);
  for (DType in : kFloats)
    for (DType out : {in, DType::kFloat32})
      for (auto [rows, D] :
           {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {7, 8}, {300, 4096}, {3, 5001}})
        for (size_t mis : kMisalign) {
          HT g = kt::random_tensor(in, {rows, 1}, rng), y(out, {rows, D});
          Both r = run_both(OpKind::kExpandLastDim, {&g}, {&y}, {D}, {1.0 / static_cast<double>(D)},
                            mis);
          expect_bits(r.gpu[0], r.cpu[0],
                      "expand " + name(in) + "->" + name(out) + " " + std::to_string(rows) + "x" +
                          std::to_string(D) + shift(mis));
        }
}

// {theta}, and Llama 3.1's scaled frequencies {theta, factor, low, high, original}.
const std::vector<std::vector<double>> kRopeArgs = {
    {10000.0}, {500000.0}, {500000.0, 8.0, 1.0, 4.0, 8192.0}};

// The frequencies are the host's (rope_inv_freq, bit for bit the CPU's), the fp32 angle is
// computed alike; cos / sin of it (double, rounded once, vs glibc's cosf / sinf) can differ by
// one ulp, which moves an output by at most ~3e-7 for |x| <= 1: within 1e-6, or one ulp of a
// 16-bit output after rounding.
TEST(CudaKernelsEager, RoPEComplexAndItsBackward) {
  std::mt19937 rng(35);
  for (DType d : kFloats)
    for (auto [S, H, hd] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2},
                            {37, 3, 8},
                            {129, 4, 64},
                            {300, 2, 128},
                            {4096, 1, 64}})
      for (const auto& fargs : kRopeArgs) {
        const std::string what = name(d) + " S=" + std::to_string(S) + " H=" + std::to_string(H) +
                                 " hd=" + std::to_string(hd) +
                                 " theta=" + std::to_string(fargs[0]) +
                                 (fargs.size() > 1 ? " llama3" : "");
        const int64_t B = S >= 4096 ? 1 : 2;
        HT x = kt::random_tensor(d, {B, S, H * hd}, rng), y(d, {B, S, H * hd});
        for (OpKind k : {OpKind::kRoPEComplex, OpKind::kRoPEComplexBackward}) {
          Both r = run_both(k, {&x}, {&y}, {hd}, fargs);
          expect_ulps(r.gpu[0], r.cpu[0], 1, 1e-6, std::string(op_kind_name(k)) + " " + what);
        }
        Both r = run_both(OpKind::kRoPEComplex, {&x}, {&x}, {hd}, fargs);  // in place
        expect_ulps(r.gpu[0], r.cpu[0], 1, 1e-6, "in place " + what);
      }
}

// HF's cos / sin tables [B, S, hd] (fp32 in the model, cast afterwards): each value within one
// ulp of the CPU's (1e-7 absolute covers fp16's subnormal steps).
TEST(CudaKernelsEager, RotaryCosSinWithinAnUlp) {
  for (auto [cd, sd] : {std::pair<DType, DType>{DType::kFloat32, DType::kFloat32},
                        {DType::kBFloat16, DType::kBFloat16},
                        {DType::kFloat16, DType::kFloat32}})
    for (auto [B, S, hd] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2}, {2, 37, 8}, {2, 300, 128}, {1, 4096, 64}})
      for (const auto& fargs : kRopeArgs) {
        const std::string what =
            name(cd) + "/" + name(sd) + " S=" + std::to_string(S) + " hd=" + std::to_string(hd) +
            " theta=" + std::to_string(fargs[0]) + (fargs.size() > 1 ? " llama3" : "");
        HT c(cd, {B, S, hd}), s(sd, {B, S, hd});
        Both r = run_both(OpKind::kRotaryCosSin, {}, {&c, &s}, {hd}, fargs);
        expect_ulps(r.gpu[0], r.cpu[0], 1, 1e-7, "cos " + what);
        expect_ulps(r.gpu[1], r.cpu[1], 1, 1e-7, "sin " + what);
      }
}

struct KvCase {
  int64_t rows, kv, rep, hd;
};

// repeat_kv: bit copies (a NaN payload survives) or casts; its backward sums the rep copies in
// fp32 in copy order, as the CPU does: bits.
TEST(CudaKernelsEager, RepeatKVAndItsBackwardAreBitExact) {
  std::mt19937 rng(36);
  for (DType d : kFloats)
    for (DType out : {d, DType::kFloat32})
      for (KvCase c :
           {KvCase{1, 1, 1, 1}, {5, 3, 2, 7}, {3, 1, 3, 8}, {74, 2, 4, 64}, {129, 8, 4, 128}})
        for (size_t mis : kMisalign) {
          const std::string what = name(d) + "->" + name(out) + " rows=" + std::to_string(c.rows) +
                                   " kv=" + std::to_string(c.kv) + " rep=" + std::to_string(c.rep) +
                                   " hd=" + std::to_string(c.hd) + shift(mis);
          HT x = kt::random_tensor(d, {c.rows, c.kv * c.hd}, rng),
             y(out, {c.rows, c.kv * c.rep * c.hd});
          if (d == out) plant_nan(x);
          Both r = run_both(OpKind::kRepeatKV, {&x}, {&y}, {c.kv, c.rep, c.hd}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "repeat_kv " + what);
          HT g = kt::random_tensor(out, {c.rows, c.kv * c.rep * c.hd}, rng),
             gx(d, {c.rows, c.kv * c.hd});
          r = run_both(OpKind::kRepeatKVBackward, {&g}, {&gx}, {c.kv, c.rep, c.hd}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "repeat_kv backward " + what);
        }
}

// rotate_half's narrow copies, as core/model/rotate_half_rope.cc launches them (-x2; neg's
// backward; the two slice_backwards into a zeroed gradient), tensor parallelism's vocab slice
// and a layout with nothing a multiple of 8. Outputs start as random values on both sides: the
// elements outside the slices must keep them.
TEST(CudaKernelsEager, NarrowCopyIsBitExactAndWritesOnlyItsSlices) {
  std::mt19937 rng(37);
  struct Layout {
    int64_t n, iw, io, ow, oo;
    double scale;
  };
  for (DType in : kFloats)
    for (DType out : {in, DType::kFloat32})
      for (int64_t hd : {2, 6, 16, 128})
        for (int64_t blocks : {1, 7, 296})
          for (size_t mis : kMisalign) {
            const int64_t h = hd / 2;
            for (Layout l : {Layout{h, hd, h, h, 0, -1.0},
                             {h, hd, 0, h, 0, -1.0},
                             {h, h, 0, hd, h, 1.0},
                             {h, hd, h, hd, 0, 1.0},
                             {hd, 3 * hd, hd, hd, 0, 1.0},
                             {5, 13, 3, 9, 4, 0.5}}) {
              const std::string what = name(in) + "->" + name(out) + " n=" + std::to_string(l.n) +
                                       " in " + std::to_string(l.iw) + "@" + std::to_string(l.io) +
                                       " out " + std::to_string(l.ow) + "@" + std::to_string(l.oo) +
                                       " blocks=" + std::to_string(blocks) + shift(mis);
              HT x = kt::random_tensor(in, {blocks, l.iw}, rng),
                 y = kt::random_tensor(out, {blocks, l.ow}, rng);
              Both r = run_both(OpKind::kNarrowCopy, {&x}, {&y}, {l.n, l.iw, l.io, l.ow, l.oo},
                                {l.scale}, mis, true);
              expect_bits(r.gpu[0], r.cpu[0], "narrow_copy " + what);
            }
          }
}

// cat(-x2, x1): bit copies (a NaN payload survives) or casts.
TEST(CudaKernelsEager, RotateHalfCatIsBitExact) {
  std::mt19937 rng(38);
  struct Dtypes {
    DType neg, x, y;
  };
  for (Dtypes t : {Dtypes{DType::kFloat32, DType::kFloat32, DType::kFloat32},
                   Dtypes{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16},
                   Dtypes{DType::kFloat16, DType::kFloat16, DType::kFloat16},
                   Dtypes{DType::kFloat32, DType::kBFloat16, DType::kBFloat16}})
    for (int64_t hd : {2, 6, 16, 128})
      for (int64_t blocks : {1, 7, 296})
        for (size_t mis : kMisalign) {
          const std::string what = name(t.neg) + "," + name(t.x) + "->" + name(t.y) +
                                   " hd=" + std::to_string(hd) +
                                   " blocks=" + std::to_string(blocks) + shift(mis);
          HT neg = kt::random_tensor(t.neg, {blocks, hd / 2}, rng),
             x = kt::random_tensor(t.x, {blocks, hd}, rng);
          HT y(t.y, {blocks, hd});
          if (t.x == t.y) plant_nan(x);
          Both r = run_both(OpKind::kRotateHalfCat, {&neg, &x}, {&y}, {hd}, {}, mis);
          expect_bits(r.gpu[0], r.cpu[0], "rotate_half cat " + what);
        }
}

}  // namespace

int main(int argc, char** argv) {
  return ckt::run_gpu_tests(argc, argv, "cuda_kernels_eager_test");
}
