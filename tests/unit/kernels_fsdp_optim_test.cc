// CPU kernels: FSDP2's copy kernels (all-gather copy-in / copy-out, reduce-scatter
// _chunk_cat) against hand-written layouts and a round-trip property; gradient clipping
// (squared norms, sum, clip scale) and AdamW against hand-computed values and a double
// reference over several steps.
#include <algorithm>

#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

Vec iota_vec(int n, double start = 1) {
  Vec v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// ------------------------------------------------------------------ chunk_cat
TEST(KernelsChunkCat, SeventeenRowsOverFourRanksPadsWithZeros) {
  // A [17, 2]: torch.chunk gives 5, 5, 5, 2 rows; every rank's chunk is padded to 5 rows.
  // B [5]: 2, 2, 1, 0 rows, padded to 2. One rank row = 10 + 2 = 12 elements; W = 4.
  HT a = from_values(DType::kFloat32, {17, 2}, iota_vec(34, 1));  // 1..34
  HT b = from_values(DType::kFloat32, {5}, iota_vec(5, 101));     // 101..105
  HT out(DType::kFloat32, {48});
  for (auto& m : out.mem) m = ~0ull;
  run(OpKind::kChunkCat, {&a, &b}, {&out}, {4});
  const Vec expect = {
      1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 101, 102,  // rank 0: A rows 0-4, B rows 0-1
      11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 103, 104,  // rank 1: A rows 5-9, B rows 2-3
      21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 105, 0,    // rank 2: A rows 10-14, B row 4 + pad
      31, 32, 33, 34, 0,  0,  0,  0,  0,  0,  0,   0};   // rank 3: A rows 15-16 + pad, B empty
  EXPECT_EQ(out.values(), expect);
  // Widening cast (bf16 grads into an fp32 reduce-scatter input) and narrowing (fp32 -> bf16).
  HT a16 = from_values(DType::kBFloat16, {17, 2}, iota_vec(34, 1)),
     b16 = from_values(DType::kBFloat16, {5}, iota_vec(5, 101));
  HT out32(DType::kFloat32, {48}), out16(DType::kBFloat16, {48});
  run(OpKind::kChunkCat, {&a16, &b16}, {&out32}, {4});
  EXPECT_EQ(out32.values(), expect);
  run(OpKind::kChunkCat, {&a, &b}, {&out16}, {4});
  EXPECT_EQ(out16.values(), expect);
  // Wrong output size is a contract violation.
  HT small(DType::kFloat32, {47});
  EXPECT_THROW(run(OpKind::kChunkCat, {&a, &b}, {&small}, {4}), InternalError);
}

// ------------------------------------------------------------------ all-gather copy-in / out
TEST(KernelsAllGatherCopy, CopyInConcatenatesWithCastAndCopyOutSplitsRankMajor) {
  // Copy-in: shards [3] and [1] (fp32) into a bf16 slice of 4 elements.
  HT s0 = from_values(DType::kFloat32, {3}, {1, 2, 3}),
     s1 = from_values(DType::kFloat32, {1}, {1.00390625});
  HT slice(DType::kBFloat16, {4});
  run(OpKind::kAllGatherCopyIn, {&s0, &s1}, {&slice});
  EXPECT_EQ(slice.values(), (Vec{1, 2, 3, 1}));  // 1 + 2^-8 ties to even in bf16
  // Copy-out: W = 2, numels {3, 1}: ag = [a0 a1 a2 b0 | a3 a4 a5 b1].
  HT ag = from_values(DType::kBFloat16, {8}, {10, 11, 12, 20, 13, 14, 15, 21});
  HT u0(DType::kBFloat16, {6}), u1(DType::kBFloat16, {2});
  run(OpKind::kAllGatherCopyOut, {&ag}, {&u0, &u1}, {3, 1, 2});
  EXPECT_EQ(u0.values(), (Vec{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(u1.values(), (Vec{20, 21}));
  // iargs must describe the buffer.
  EXPECT_THROW(run(OpKind::kAllGatherCopyOut, {&ag}, {&u0, &u1}, {3, 1, 3}), InternalError);
  EXPECT_THROW(run(OpKind::kAllGatherCopyIn, {&s0}, {&slice}), InternalError);
}

// Every rank's padded shard is its row of the chunk_cat layout; copying each rank's
// shards into its all-gather slice and copying out must give back each tensor as the
// prefix of its padded unsharded storage, zeros after.
RC_GTEST_PROP(KernelsAllGatherCopy, ChunkCatShardsRoundTripThroughCopyInAndOut, ()) {
  const int W = *rc::gen::inRange(1, 6), P = *rc::gen::inRange(1, 4);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::vector<HT> params;
  std::vector<int64_t> padded;  // per-param padded shard numel
  int64_t row = 0;
  for (int j = 0; j < P; ++j) {
    const int d0 = *rc::gen::inRange(1, 12);
    const bool two_d = *rc::gen::arbitrary<bool>();
    Shape s = two_d ? Shape{d0, *rc::gen::inRange(1, 4)} : Shape{d0};
    params.push_back(random_tensor(DType::kFloat32, s, rng));
    const int64_t rn = two_d ? s[1] : 1;
    padded.push_back(ceil_div(d0, W) * rn);
    row += padded.back();
  }
  std::vector<HT*> ptrs;
  for (auto& p : params) ptrs.push_back(&p);
  HT cat(DType::kFloat32, {W * row});
  run(OpKind::kChunkCat, ptrs, {&cat}, {W});
  // Rank r's shards: its row of `cat`, split per param (what reduce-scatter leaves on rank r).
  HT ag(DType::kFloat32, {W * row});
  for (int r = 0; r < W; ++r) {
    std::vector<HT> shards;
    int64_t off = r * row;
    for (int j = 0; j < P; ++j) {
      HT s(DType::kFloat32, {padded[j]});
      for (int64_t e = 0; e < padded[j]; ++e) s.set(e, cat.get(off + e));
      off += padded[j];
      shards.push_back(std::move(s));
    }
    std::vector<HT*> sp;
    for (auto& s : shards) sp.push_back(&s);
    HT slice(DType::kFloat32, {row});
    run(OpKind::kAllGatherCopyIn, sp, {&slice});
    for (int64_t e = 0; e < row; ++e) ag.set(r * row + e, slice.get(e));
  }
  RC_ASSERT(ag.values() == cat.values());  // the AG output has the RS input's layout
  std::vector<HT> unsharded;
  for (int j = 0; j < P; ++j) unsharded.emplace_back(DType::kFloat32, Shape{W * padded[j]});
  std::vector<HT*> up;
  for (auto& u : unsharded) up.push_back(&u);
  std::vector<int64_t> iargs(padded);
  iargs.push_back(W);
  run(OpKind::kAllGatherCopyOut, {&ag}, up, iargs);
  for (int j = 0; j < P; ++j) {
    const Vec orig = params[j].values(), got = unsharded[j].values();
    for (size_t e = 0; e < got.size(); ++e) RC_ASSERT(got[e] == (e < orig.size() ? orig[e] : 0.0));
  }
}

// ------------------------------------------------------------------ clipping
TEST(KernelsClip, SquaredNormsSumAndScale) {
  HT g0 = from_values(DType::kFloat32, {2}, {3, 4}),
     g1 = from_values(DType::kBFloat16, {2, 2}, {1, 2, 2, 4});
  HT norms(DType::kFloat32, {2}), total(DType::kFloat32, {1});
  run(OpKind::kSquaredNorm, {&g0, &g1}, {&norms});
  EXPECT_EQ(norms.values(), (Vec{25, 25}));
  run(OpKind::kSum, {&norms}, {&total});
  EXPECT_EQ(total.get(0), 50);
  // max_norm 1: coef = 1 / (sqrt(50) + 1e-6) in fp32, applied in place.
  const float coef = 1.0f / (std::sqrt(50.0f) + 1e-6f);
  run(OpKind::kClipGradScale, {&total, &g0, &g1}, {&g0, &g1}, {}, {1.0});
  EXPECT_EQ(g0.get(0), static_cast<double>(3.0f * coef));
  EXPECT_EQ(g0.get(1), static_cast<double>(4.0f * coef));
  EXPECT_EQ(g1.bits16(3), float_to_bf16(4.0f * coef));
  double n2 = 0;
  for (double v : g0.values()) n2 += v * v;
  for (double v : g1.values()) n2 += v * v;
  EXPECT_NEAR(std::sqrt(n2), 1.0, 1e-2);  // bf16 rounding of g1
  // Under the threshold the coefficient clamps to 1: values unchanged.
  HT g2 = from_values(DType::kFloat32, {3}, {0.1, -0.2, 0.3}),
     t2 = from_values(DType::kFloat32, {1}, {0.14});
  const Vec before = g2.values();
  run(OpKind::kClipGradScale, {&t2, &g2}, {&g2}, {}, {1.0});
  EXPECT_EQ(g2.values(), before);
}

TEST(KernelsClip, SquaredNormOfLargeTensorAccumulatesInDouble) {
  HT g(DType::kFloat32, {100000});
  for (int64_t i = 0; i < g.numel(); ++i) g.set(i, i % 2 ? 0.1 : -0.1);
  HT n(DType::kFloat32, {1});
  run(OpKind::kSquaredNorm, {&g}, {&n});
  EXPECT_NEAR(n.get(0), 100000 * static_cast<double>(0.1f) * static_cast<double>(0.1f), 1e-3);
}

// ------------------------------------------------------------------ AdamW
TEST(KernelsAdamW, HandComputedFirstStep) {
  // p = 1, g = 0.5, lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01, step 1:
  //   p = 1 * (1 - 0.1 * 0.01) = 0.999; m = 0.05; v = 0.001 * 0.25 = 2.5e-4
  //   denom = sqrt(2.5e-4) / sqrt(1 - 0.999) + 1e-8 = 0.5 + 1e-8
  //   p -= (0.1 / (1 - 0.9)) * 0.05 / denom  ->  0.999 - 0.1 = 0.899
  HT p = from_values(DType::kFloat32, {1}, {1}), g = from_values(DType::kFloat32, {1}, {0.5});
  HT m(DType::kFloat32, {1}), v(DType::kFloat32, {1}), denom(DType::kFloat32, {1});
  const std::vector<double> fargs = {0.1, 0.9, 0.999, 1e-8, 0.01, 1};
  run(OpKind::kAdamW, {&p, &g, &m, &v}, {&p, &m, &v, &denom}, {0}, fargs);
  EXPECT_NEAR(p.get(0), 0.899, 1e-6);
  EXPECT_NEAR(m.get(0), 0.05, 1e-8);
  EXPECT_NEAR(v.get(0), 2.5e-4, 1e-10);
  EXPECT_NEAR(denom.get(0), 0.5, 1e-6);  // foreach's exp_avg_sq_sqrt temporary
  // Step 2 with g = -1 (fused: no temporary):
  //   p = 0.899 * 0.999 = 0.898101; m = 0.9 * 0.05 - 0.1 = -0.055
  //   v = 0.999 * 2.5e-4 + 0.001 = 1.24975e-3
  //   denom = sqrt(1.24975e-3) / sqrt(1 - 0.999^2) + 1e-8; p -= (0.1 / 0.19) * m / denom
  g.set(0, -1);
  run(OpKind::kAdamW, {&p, &g, &m, &v}, {&p, &m, &v}, {1}, {0.1, 0.9, 0.999, 1e-8, 0.01, 2});
  const double d2 = std::sqrt(1.24975e-3) / std::sqrt(1 - 0.999 * 0.999) + 1e-8;
  EXPECT_NEAR(p.get(0), 0.898101 - (0.1 / 0.19) * (-0.055) / d2, 1e-6);
  EXPECT_NEAR(m.get(0), -0.055, 1e-7);
  EXPECT_NEAR(v.get(0), 1.24975e-3, 1e-9);
}

RC_GTEST_PROP(KernelsAdamW, SeveralParamsSeveralStepsMatchDoubleReference, ()) {
  const int P = *rc::gen::inRange(1, 4), steps = *rc::gen::inRange(1, 5);
  const bool fused = *rc::gen::arbitrary<bool>();
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = *rc::gen::element(0.0, 0.1);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::vector<HT> p, m, v, tmp;
  std::vector<Vec> rp, rm, rv;
  for (int j = 0; j < P; ++j) {
    const int n = *rc::gen::inRange(1, 3000);
    p.push_back(random_tensor(DType::kFloat32, {n}, rng));
    m.emplace_back(DType::kFloat32, Shape{n});
    v.emplace_back(DType::kFloat32, Shape{n});
    tmp.emplace_back(DType::kFloat32, Shape{n});
    rp.push_back(p.back().values());
    rm.emplace_back(n, 0.0);
    rv.emplace_back(n, 0.0);
  }
  for (int t = 1; t <= steps; ++t) {
    std::vector<HT> g;
    for (int j = 0; j < P; ++j) g.push_back(random_tensor(DType::kFloat32, p[j].meta.shape, rng));
    std::vector<HT*> in, out;
    for (int j = 0; j < P; ++j) {
      in.insert(in.end(), {&p[j], &g[j], &m[j], &v[j]});
      out.insert(out.end(), {&p[j], &m[j], &v[j]});
      if (!fused) out.push_back(&tmp[j]);
    }
    run(OpKind::kAdamW, in, out, {fused ? 1 : 0}, {lr, b1, b2, eps, wd, static_cast<double>(t)});
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (int j = 0; j < P; ++j) {
      const Vec gv = g[j].values();
      for (size_t e = 0; e < gv.size(); ++e) {
        rp[j][e] *= 1 - lr * wd;
        rm[j][e] = b1 * rm[j][e] + (1 - b1) * gv[e];
        rv[j][e] = b2 * rv[j][e] + (1 - b2) * gv[e] * gv[e];
        rp[j][e] -= lr / bc1 * rm[j][e] / (std::sqrt(rv[j][e] / bc2) + eps);
      }
    }
  }
  for (int j = 0; j < P; ++j) {
    KT_RC_CLOSE(p[j].values(), rp[j], 1e-6, 1e-5);
    KT_RC_CLOSE(m[j].values(), rm[j], 1e-7, 1e-5);
    KT_RC_CLOSE(v[j].values(), rv[j], 1e-9, 1e-5);
  }
}

TEST(KernelsAdamW, Bf16StateIsRoundedOnce) {
  // bf16 param / grad / states: fp32 math, each stored value rounded once.
  HT p = from_values(DType::kBFloat16, {2}, {1, -2}),
     g = from_values(DType::kBFloat16, {2}, {0.5, 0.25});
  HT m(DType::kBFloat16, {2}), v(DType::kBFloat16, {2});
  run(OpKind::kAdamW, {&p, &g, &m, &v}, {&p, &m, &v}, {1}, {0.1, 0.9, 0.999, 1e-8, 0.0, 1});
  // Step 1 without decay moves every element by lr * sign(g) (|m / denom| = 1 up to eps).
  EXPECT_EQ(p.bits16(0), float_to_bf16(0.9f));
  EXPECT_EQ(p.bits16(1), float_to_bf16(-2.1f));
  EXPECT_EQ(m.bits16(0), float_to_bf16(0.05f));
  EXPECT_EQ(v.bits16(1), float_to_bf16(0.001f * 0.0625f));
  HT bad(DType::kFloat32, {3});
  EXPECT_THROW(
      run(OpKind::kAdamW, {&p, &bad, &m, &v}, {&p, &m, &v}, {1}, {0.1, 0.9, 0.999, 1e-8, 0.0, 1}),
      InternalError);
}
