// CPU kernels of eager decompositions (backends/cpu/kernels/eager.cc): each against a
// double-precision reference over random small shapes and storage dtypes, and the whole
// rms_norm=eager chain (forward, then backward in autograd's order, NOTE [Eager RMSNorm] in
// core/model/eager_norm.cc) against the fused RMSNorm kernels in fp32: the same math up to fp32
// rounding order, so outputs and gradients agree within 1e-5 relative.
#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

Vec map(const Vec& x, const std::function<double(double)>& f) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

}  // namespace

RC_GTEST_PROP(KernelsEager, PointwiseScalarOps, ()) {
  const DType dt = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 40);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {n}, rng, 0.25, 2.0), y(dt, {n});
  const Vec xv = x.values();
  const double tol = rel_eps(dt) + 1e-6;
  for (double p : {1.0, 2.0, 3.0, 0.5}) {
    run(OpKind::kPowScalar, {&x}, {&y}, {}, {p});
    KT_RC_CLOSE(y.values(), map(xv, [p](double v) { return std::pow(v, p); }), 0, tol);
  }
  run(OpKind::kAddScalar, {&x}, {&y}, {}, {1e-5});
  KT_RC_CLOSE(y.values(), map(xv, [](double v) { return v + 1e-5; }), 0, tol);
  run(OpKind::kRsqrt, {&x}, {&y});
  KT_RC_CLOSE(y.values(), map(xv, [](double v) { return 1 / std::sqrt(v); }), 0, tol);
}

RC_GTEST_PROP(KernelsEager, BroadcastsAndSums, ()) {
  const DType dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 7), D = *rc::gen::inRange(1, 18);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT a = random_tensor(dt, {R, D}, rng), br = random_tensor(DType::kFloat32, {R, 1}, rng),
     bc = random_tensor(dt, {D}, rng), y(dt, {R, D});
  const Vec av = a.values(), brv = br.values(), bcv = bc.values();
  const double tol = rel_eps(dt) + 1e-6;
  Vec e(av.size());
  run(OpKind::kMulBroadcast, {&a, &br}, {&y}, {0, D});
  for (int r = 0; r < R; ++r)
    for (int d = 0; d < D; ++d) e[r * D + d] = av[r * D + d] * brv[r];
  KT_RC_CLOSE(y.values(), e, 1e-7, tol);
  run(OpKind::kMulBroadcast, {&a, &bc}, {&y}, {1, D});
  for (int r = 0; r < R; ++r)
    for (int d = 0; d < D; ++d) e[r * D + d] = av[r * D + d] * bcv[d];
  KT_RC_CLOSE(y.values(), e, 1e-7, tol);
  // Sums: over the last dim (scaled: mean), over the leading dims; mean's backward.
  HT rs(DType::kFloat32, {R, 1}), cs(dt, {D});
  run(OpKind::kSumLastDim, {&a}, {&rs}, {D}, {1.0 / D});
  Vec er(R, 0.0), ec(D, 0.0);
  for (int r = 0; r < R; ++r)
    for (int d = 0; d < D; ++d) er[r] += av[r * D + d] / D, ec[d] += av[r * D + d];
  KT_RC_CLOSE(rs.values(), er, 1e-6, 1e-6);
  run(OpKind::kSumLeadingDims, {&a}, {&cs}, {D});
  KT_RC_CLOSE(cs.values(), ec, 1e-6, rel_eps(dt) + 1e-6);
  run(OpKind::kExpandLastDim, {&br}, {&y}, {D}, {0.5});
  for (int r = 0; r < R; ++r)
    for (int d = 0; d < D; ++d) e[r * D + d] = brv[r] * 0.5;
  KT_RC_CLOSE(y.values(), e, 1e-7, tol);
}

TEST(KernelsEager, BadArgumentsAreInternalErrors) {
  HT a(DType::kFloat32, {2, 3}), b(DType::kFloat32, {4}), y(DType::kFloat32, {2, 3});
  EXPECT_THROW(run(OpKind::kMulBroadcast, {&a, &b}, {&y}, {1, 3}), InternalError);  // b is not [D]
  HT s(DType::kFloat32, {3});
  EXPECT_THROW(run(OpKind::kSumLastDim, {&a}, {&s}, {3}), InternalError);  // 2 rows, 3 outputs
  EXPECT_THROW(run(OpKind::kPowScalar, {&a}, {&y}), InternalError);        // no exponent
}

// The eager chain, kernel by kernel as core/model/eager_norm.cc launches it in fp32 (x.float()
// and type_as are no-ops), against kRMSNorm / kRMSNormBackward.
RC_GTEST_PROP(KernelsEager, RmsNormChainMatchesFusedInFp32, ()) {
  const DType f = DType::kFloat32;
  const int R = *rc::gen::inRange(1, 9), D = *rc::gen::inRange(2, 33);
  const double eps = 1e-5;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(f, {R, D}, rng, -2, 2), w = random_tensor(f, {D}, rng, 0.5, 1.5);
  HT g = random_tensor(f, {R, D}, rng);
  // Fused.
  HT y0(f, {R, D}), rstd(f, {R}), gx0(f, {R, D}), gw0(f, {D});
  run(OpKind::kRMSNorm, {&x, &w}, {&y0, &rstd}, {}, {eps});
  run(OpKind::kRMSNormBackward, {&g, &x, &rstd, &w}, {&gx0, &gw0});
  // Eager forward.
  HT sq(f, {R, D}), ms(f, {R, 1}), ve(f, {R, 1}), r(f, {R, 1}), n(f, {R, D}), y(f, {R, D});
  run(OpKind::kPowScalar, {&x}, {&sq}, {}, {2.0});
  run(OpKind::kSumLastDim, {&sq}, {&ms}, {D}, {1.0 / D});
  run(OpKind::kAddScalar, {&ms}, {&ve}, {}, {eps});
  run(OpKind::kRsqrt, {&ve}, {&r});
  run(OpKind::kMulBroadcast, {&x, &r}, {&n}, {0, D});
  run(OpKind::kMulBroadcast, {&n, &w}, {&y}, {1, D});
  // Eager backward, in reverse: * weight, mul (x, r), rsqrt, add eps, mean, pow.
  HT gn(f, {R, D}), full(f, {R, D}), gw(f, {D});
  run(OpKind::kMulBroadcast, {&g, &w}, {&gn}, {1, D});
  run(OpKind::kMul, {&g, &n}, {&full});
  run(OpKind::kSumLeadingDims, {&full}, {&gw}, {D});
  HT gx_a(f, {R, D}), gr(f, {R, 1});
  run(OpKind::kMulBroadcast, {&gn, &r}, {&gx_a}, {0, D});
  run(OpKind::kMul, {&gn, &x}, {&full});
  run(OpKind::kSumLastDim, {&full}, {&gr}, {D}, {1.0});
  HT t1(f, {R, 1}), t2(f, {R, 1}), gve(f, {R, 1});
  run(OpKind::kScale, {&gr}, {&t1}, {}, {-0.5});
  run(OpKind::kPowScalar, {&r}, {&t2}, {}, {3.0});
  run(OpKind::kMul, {&t1, &t2}, {&gve});
  HT gsq(f, {R, D}), p1(f, {R, D}), p2(f, {R, D}), gx_b(f, {R, D}), gx(f, {R, D});
  run(OpKind::kExpandLastDim, {&gve}, {&gsq}, {D}, {1.0 / D});
  run(OpKind::kPowScalar, {&x}, {&p1}, {}, {1.0});
  run(OpKind::kScale, {&p1}, {&p2}, {}, {2.0});
  run(OpKind::kMul, {&gsq, &p2}, {&gx_b});
  run(OpKind::kAdd, {&gx_a, &gx_b}, {&gx});
  KT_RC_CLOSE(y.values(), y0.values(), 1e-6 * (1 + max_abs(y0.values())), 1e-5);
  KT_RC_CLOSE(gw.values(), gw0.values(), 1e-6 * (1 + max_abs(gw0.values())), 1e-5);
  KT_RC_CLOSE(gx.values(), gx0.values(), 1e-5 * (1 + max_abs(gx0.values())), 1e-5);
}

// rope=complex: view_as_complex pairs ADJACENT elements, (x[2i] + i x[2i+1]) * e^{i pos theta_i}:
// y[2i] = x[2i] cos - x[2i+1] sin, y[2i+1] = x[2i] sin + x[2i+1] cos, theta_i = theta^(-2i/hd);
// the backward multiplies by the conjugate (the inverse rotation).
RC_GTEST_PROP(KernelsEager, RoPEComplexIsTheAdjacentPairRotation, ()) {
  const DType dt = *gen_float_dtype();
  const int B = *rc::gen::inRange(1, 3), S = *rc::gen::inRange(1, 6), H = *rc::gen::inRange(1, 3);
  const int hd = 2 * *rc::gen::inRange(1, 5);
  const double theta = 10000.0;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {B, S, H * hd}, rng), y(dt, {B, S, H * hd}), back(dt, {B, S, H * hd});
  run(OpKind::kRoPEComplex, {&x}, {&y}, {hd}, {theta});
  const Vec xv = x.values();
  Vec e(xv.size());
  for (int b = 0; b < B; ++b)
    for (int p = 0; p < S; ++p)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const double a = p * std::pow(theta, -2.0 * i / hd);
          const int o = (b * S + p) * H * hd + h * hd + 2 * i;
          e[o] = xv[o] * std::cos(a) - xv[o + 1] * std::sin(a);
          e[o + 1] = xv[o] * std::sin(a) + xv[o + 1] * std::cos(a);
        }
  KT_RC_CLOSE(y.values(), e, 1e-6, rel_eps(dt) + 1e-6);
  // The backward of a rotation is its inverse: applied to y it gives x back.
  HT yf = from_values(DType::kFloat32, {B, S, H * hd}, e), xf(DType::kFloat32, {B, S, H * hd});
  run(OpKind::kRoPEComplexBackward, {&yf}, {&xf}, {hd}, {theta});
  KT_RC_CLOSE(xf.values(), xv, 1e-5, 1e-5);
}

TEST(KernelsEager, RoPEComplexDiffersFromRotateHalf) {
  // hd = 4, position 1: complex pairs (0, 1), (2, 3); rotate-half pairs (0, 2), (1, 3).
  HT x = from_values(DType::kFloat32, {1, 2, 4}, {0, 0, 0, 0, 1, 0, 0, 0}),
     y(DType::kFloat32, {1, 2, 4}), z(DType::kFloat32, {1, 2, 4});
  run(OpKind::kRoPEComplex, {&x}, {&y}, {4}, {10000.0});
  run(OpKind::kRoPE, {&x}, {&z}, {4}, {10000.0});
  EXPECT_NEAR(y.get(4), std::cos(1.0), 1e-6);
  EXPECT_NEAR(y.get(5), std::sin(1.0), 1e-6);  // the partner is the adjacent element
  EXPECT_NEAR(y.get(6), 0.0, 1e-7);
  EXPECT_NEAR(z.get(6), std::sin(1.0), 1e-6);  // rotate-half's partner is i + hd/2
}

// gqa=repeat_kv: head j of the copy is kv head j / n_rep; the backward sums the n_rep copies.
RC_GTEST_PROP(KernelsEager, RepeatKVAndItsBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 5), kv = *rc::gen::inRange(1, 4),
            rep = *rc::gen::inRange(1, 4), hd = *rc::gen::inRange(1, 6);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {R, kv * hd}, rng), y(dt, {R, kv * rep * hd});
  run(OpKind::kRepeatKV, {&x}, {&y}, {kv, rep, hd});
  const Vec xv = x.values(), yv = y.values();
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < kv * rep; ++h)
      for (int d = 0; d < hd; ++d)
        RC_ASSERT(yv[(r * kv * rep + h) * hd + d] == xv[(r * kv + h / rep) * hd + d]);
  HT g = random_tensor(dt, {R, kv * rep * hd}, rng), gx(dt, {R, kv * hd});
  run(OpKind::kRepeatKVBackward, {&g}, {&gx}, {kv, rep, hd});
  const Vec gv = g.values();
  Vec e(static_cast<size_t>(R * kv * hd), 0.0);
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < kv * rep; ++h)
      for (int d = 0; d < hd; ++d)
        e[(r * kv + h / rep) * hd + d] += gv[(r * kv * rep + h) * hd + d];
  KT_RC_CLOSE(gx.values(), e, 1e-6, rel_eps(dt) * rep + 1e-6);
}

// rope=rotate_half, kernel by kernel: q * cos + cat(-x2, x1) * sin with HF's cos / sin tables
// equals the fused rotate-half kernel (the same pairing and angles).
RC_GTEST_PROP(KernelsEager, RotateHalfChainMatchesFusedRoPE, ()) {
  const DType f = DType::kFloat32;
  const int B = *rc::gen::inRange(1, 3), S = *rc::gen::inRange(1, 6), H = *rc::gen::inRange(1, 3);
  const int hd = 2 * *rc::gen::inRange(1, 5), D = H * hd, h = hd / 2;
  const double theta = 500.0;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(f, {B, S, D}, rng), fused(f, {B, S, D});
  run(OpKind::kRoPE, {&x}, {&fused}, {hd}, {theta});
  HT cos(f, {B, S, hd}), sin(f, {B, S, hd}), t1(f, {B, S, D}), neg(f, {B, S, D / 2}),
      rot(f, {B, S, D}), t2(f, {B, S, D}), y(f, {B, S, D});
  run(OpKind::kRotaryCosSin, {}, {&cos, &sin}, {hd}, {theta});
  run(OpKind::kMulBroadcast, {&x, &cos}, {&t1}, {2, D, hd});
  run(OpKind::kNarrowCopy, {&x}, {&neg}, {h, hd, h, h, 0}, {-1.0});
  run(OpKind::kRotateHalfCat, {&neg, &x}, {&rot}, {hd});
  run(OpKind::kMulBroadcast, {&rot, &sin}, {&t2}, {2, D, hd});
  run(OpKind::kAdd, {&t1, &t2}, {&y});
  KT_RC_CLOSE(y.values(), fused.values(), 1e-6, 1e-5);
  // rotate_half's backward (neg backward, both slice backwards, accumulated) is its transpose:
  // <rot(x), g> == <x, rot^T(g)>.
  HT g = random_tensor(f, {B, S, D}, rng), gneg(f, {B, S, D / 2}), gx2(f, {B, S, D}),
     gx1(f, {B, S, D});
  run(OpKind::kNarrowCopy, {&g}, {&gneg}, {h, hd, 0, h, 0}, {-1.0});
  run(OpKind::kFill, {}, {&gx2});
  run(OpKind::kNarrowCopy, {&gneg}, {&gx2}, {h, h, 0, hd, h}, {1.0});
  run(OpKind::kFill, {}, {&gx1});
  run(OpKind::kNarrowCopy, {&g}, {&gx1}, {h, hd, h, hd, 0}, {1.0});
  run(OpKind::kAdd, {&gx2, &gx1}, {&gx2});
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    lhs += rot.get(i) * g.get(i), rhs += x.get(i) * gx2.get(i);
  RC_ASSERT(std::abs(lhs - rhs) <= 1e-5 * (1 + std::abs(lhs)));
}

TEST(KernelsEager, RotaryCosSinDuplicatesTheHalfFrequencies) {
  HT cos(DType::kFloat32, {1, 3, 4}), sin(DType::kFloat32, {1, 3, 4});
  run(OpKind::kRotaryCosSin, {}, {&cos, &sin}, {4}, {100.0});
  // position 2, element 1 and 3: frequency 100^(-2/4) = 0.1.
  EXPECT_NEAR(cos.get(2 * 4 + 1), std::cos(0.2), 1e-7);
  EXPECT_NEAR(sin.get(2 * 4 + 3), std::sin(0.2), 1e-7);
  EXPECT_NEAR(sin.get(2 * 4 + 0), std::sin(2.0), 1e-6);
}
