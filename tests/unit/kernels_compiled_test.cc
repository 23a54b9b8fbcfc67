// CPU kernels of torch.compile's fused regions (backends/cpu/kernels/compiled.cc): the same
// maths as the eager ops they replace, against double references with one rounding of the
// output dtype (rel_eps) and finite-difference gradients, or bit for bit against the eager
// kernel where the region computes exactly what that kernel does (the RoPE rotations).
#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

double silu_ref(double x) { return x / (1 + std::exp(-x)); }

// RMSNorm of (x + a) rows, * w.
Vec add_rms_ref(const Vec& x, const Vec& a, const Vec& w, int R, int D, double eps) {
  Vec y(x.size());
  for (int r = 0; r < R; ++r) {
    double ss = 0;
    for (int d = 0; d < D; ++d) ss += (x[r * D + d] + a[r * D + d]) * (x[r * D + d] + a[r * D + d]);
    const double rs = 1 / std::sqrt(ss / D + eps);
    for (int d = 0; d < D; ++d) y[r * D + d] = (x[r * D + d] + a[r * D + d]) * rs * w[d];
  }
  return y;
}

HT spread(DType dt, int R, int D, std::mt19937& rng) {
  HT x = random_tensor(dt, {R, D}, rng, -1, 1);
  for (int i = 0; i < R * D; ++i) x.set(i, x.get(i) + ((i % D) % 2 ? 0.75 : -0.75));
  return x;
}

}  // namespace

RC_GTEST_PROP(KernelsCompiled, RmsNormIsTheFusedKernel, ()) {
  const DType dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 7), D = *rc::gen::inRange(1, 18);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = spread(dt, R, D, rng), w = random_tensor(dt, {D}, rng, 0.5, 1.5);
  HT y1(dt, {R, D}), r1(DType::kFloat32, {R}), y2(dt, {R, D}), r2(DType::kFloat32, {R});
  run(OpKind::kRMSNorm, {&x, &w}, {&y1, &r1}, {}, {1e-5});
  run(OpKind::kCompiledRMSNorm, {&x, &w}, {&y2, &r2}, {}, {1e-5});
  RC_ASSERT(y1.values() == y2.values());
  RC_ASSERT(r1.values() == r2.values());
  // Backward with the residual gradient added in: the eager backward + g_res.
  HT g = random_tensor(dt, {R, D}, rng), gr = random_tensor(dt, {R, D}, rng);
  HT gx1(DType::kFloat32, {R, D}), gw1(dt, {D}), gx2(DType::kFloat32, {R, D}), gw2(dt, {D});
  run(OpKind::kRMSNormBackward, {&g, &x, &r1, &w}, {&gx1, &gw1});
  run(OpKind::kCompiledRMSNormBackward, {&g, &x, &r1, &w, &gr}, {&gx2, &gw2}, {0, 1});
  Vec e = gx1.values();
  for (int i = 0; i < R * D; ++i) e[i] += gr.get(i);
  KT_RC_CLOSE(gx2.values(), e, 1e-6, 1e-6);
  RC_ASSERT(gw1.values() == gw2.values());
}

RC_GTEST_PROP(KernelsCompiled, AddRmsNormForwardAndBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 7), D = *rc::gen::inRange(1, 18);
  const double eps = 1e-5;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = spread(dt, R, D, rng), a = random_tensor(dt, {R, D}, rng, -0.2, 0.2),
     w = random_tensor(dt, {D}, rng, 0.5, 1.5);
  HT y(dt, {R, D}), rstd(DType::kFloat32, {R});
  run(OpKind::kCompiledAddRMSNorm, {&x, &a, &w}, {&y, &rstd}, {}, {eps});
  const Vec xv = x.values(), av = a.values(), wv = w.values();
  KT_RC_CLOSE(y.values(), add_rms_ref(xv, av, wv, R, D, eps), 1e-5, rel_eps(dt) + 1e-5);
  // Backward (g_y, x, rstd, w, a, g_h) -> (d(x + a), g_w): the norm's gradient + g_h.
  HT g = random_tensor(dt, {R, D}, rng), gh = random_tensor(dt, {R, D}, rng);
  HT gx(dt, {R, D}), gw(dt, {D});
  run(OpKind::kCompiledRMSNormBackward, {&g, &x, &rstd, &w, &a, &gh}, {&gx, &gw}, {1, 1});
  const Vec gv = g.values();
  Vec ex = fd_grad([&](const Vec& v) { return add_rms_ref(v, av, wv, R, D, eps); }, xv, gv);
  for (int i = 0; i < R * D; ++i) ex[i] += gh.get(i);
  const Vec ew = fd_grad([&](const Vec& v) { return add_rms_ref(xv, av, v, R, D, eps); }, wv, gv);
  KT_RC_CLOSE(gx.values(), ex, 1e-4 * (1 + max_abs(ex)), rel_eps(dt) + 1e-4);
  KT_RC_CLOSE(gw.values(), ew, 1e-4 * (1 + max_abs(ew)), rel_eps(dt) + 1e-4);
}

RC_GTEST_PROP(KernelsCompiled, RopeIsTheEagerRotationInPlace, ()) {
  const DType dt = *gen_float_dtype();
  const bool adjacent = *rc::gen::arbitrary<bool>();
  const int hd = 2 * *rc::gen::inRange(1, 5), S = *rc::gen::inRange(1, 6);
  const int hq = *rc::gen::inRange(1, 4), hk = *rc::gen::inRange(1, 4);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT q = random_tensor(dt, {2, S, hq * hd}, rng), k = random_tensor(dt, {2, S, hk * hd}, rng);
  HT eq(dt, {2, S, hq * hd}), ek(dt, {2, S, hk * hd});
  const OpKind fwd = adjacent ? OpKind::kRoPEComplex : OpKind::kRoPE;
  const OpKind bwd = adjacent ? OpKind::kRoPEComplexBackward : OpKind::kRoPEBackward;
  run(fwd, {&q}, {&eq}, {hd}, {500000.0});
  run(fwd, {&k}, {&ek}, {hd}, {500000.0});
  run(OpKind::kCompiledRoPE, {&q, &k}, {&q, &k}, {hd, adjacent ? 1 : 0}, {500000.0});  // in place
  RC_ASSERT(q.values() == eq.values());
  RC_ASSERT(k.values() == ek.values());
  HT g = random_tensor(dt, {2, S, hq * hd}, rng), e(dt, {2, S, hq * hd}), gx(dt, {2, S, hq * hd});
  run(bwd, {&g}, {&e}, {hd}, {500000.0});
  run(OpKind::kCompiledRoPEBackward, {&g}, {&gx}, {hd, adjacent ? 1 : 0}, {500000.0});
  RC_ASSERT(gx.values() == e.values());
}

RC_GTEST_PROP(KernelsCompiled, SiluMulForwardAndBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 5000);  // across the 2048-element chunks
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT a = random_tensor(dt, {n}, rng, -3, 3), b = random_tensor(dt, {n}, rng), y(dt, {n});
  run(OpKind::kCompiledSiluMul, {&a, &b}, {&y});
  const Vec av = a.values(), bv = b.values();
  Vec e(n);
  for (int i = 0; i < n; ++i) e[i] = silu_ref(av[i]) * bv[i];
  KT_RC_CLOSE(y.values(), e, 1e-6, rel_eps(dt) + 1e-5);
  HT g = random_tensor(dt, {n}, rng), ga(dt, {n}), gb(dt, {n});
  run(OpKind::kCompiledSiluMulBackward, {&g, &a, &b}, {&ga, &gb});
  Vec ea(n), eb(n);
  for (int i = 0; i < n; ++i) {
    const double s = 1 / (1 + std::exp(-av[i]));
    ea[i] = g.get(i) * bv[i] * s * (1 + av[i] * (1 - s));
    eb[i] = g.get(i) * silu_ref(av[i]);
  }
  KT_RC_CLOSE(ga.values(), ea, 1e-6, rel_eps(dt) + 1e-5);
  KT_RC_CLOSE(gb.values(), eb, 1e-6, rel_eps(dt) + 1e-5);
}

RC_GTEST_PROP(KernelsCompiled, ResidualAddRoundsOnce, ()) {
  const DType dt = *gen_float_dtype();
  const int n = *rc::gen::inRange(1, 5000);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {n}, rng), a = random_tensor(dt, {n}, rng),
     f = random_tensor(dt, {n}, rng);
  Vec e(n);
  for (int i = 0; i < n; ++i)
    e[i] = round_to(dt, static_cast<float>(static_cast<float>(x.get(i) + a.get(i)) + f.get(i)));
  run(OpKind::kCompiledResidualAdd, {&x, &a, &f}, {&f});  // written over f, as the block does
  RC_ASSERT(f.values() == e);
}
