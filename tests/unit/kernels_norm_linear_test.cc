// CPU kernels: RMSNorm, LayerNorm, linear (forward, grad input / weight / bias) and RoPE.
// Forwards against double-precision references over random small shapes (1-sized and odd
// dims included), for fp32 / bf16 / fp16 storage: the tolerance is one rounding of the
// output dtype (rel_eps) plus 1e-5 for fp32 math. Backwards against central finite
// differences (h = 1e-5) of sum(g * f(...)) over the double reference, same tolerances
// relative to the gradient's scale.
#include <algorithm>

#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

// x has values spread enough that no row is nearly constant (well-conditioned norms).
HT norm_input(DType dt, int R, int D, std::mt19937& rng) {
  HT x = random_tensor(dt, {R, D}, rng, -1, 1);
  for (int i = 0; i < R * D; ++i) x.set(i, x.get(i) + ((i % D) % 2 ? 0.75 : -0.75));
  return x;
}

// ---- references (double)
Vec rms_ref(const Vec& x, const Vec& w, int R, int D, double eps, Vec* rstd = nullptr) {
  Vec y(x.size());
  if (rstd) rstd->resize(R);
  for (int r = 0; r < R; ++r) {
    double ss = 0;
    for (int d = 0; d < D; ++d) ss += x[r * D + d] * x[r * D + d];
    const double rs = 1 / std::sqrt(ss / D + eps);
    if (rstd) (*rstd)[r] = rs;
    for (int d = 0; d < D; ++d) y[r * D + d] = x[r * D + d] * rs * w[d];
  }
  return y;
}

Vec ln_ref(const Vec& x, const Vec& w, const Vec& b, int R, int D, double eps, Vec* mean = nullptr,
           Vec* rstd = nullptr) {
  Vec y(x.size());
  if (mean) mean->resize(R);
  if (rstd) rstd->resize(R);
  for (int r = 0; r < R; ++r) {
    double mu = 0;
    for (int d = 0; d < D; ++d) mu += x[r * D + d];
    mu /= D;
    double var = 0;
    for (int d = 0; d < D; ++d) var += (x[r * D + d] - mu) * (x[r * D + d] - mu);
    const double rs = 1 / std::sqrt(var / D + eps);
    if (mean) (*mean)[r] = mu;
    if (rstd) (*rstd)[r] = rs;
    for (int d = 0; d < D; ++d) y[r * D + d] = (x[r * D + d] - mu) * rs * w[d] + b[d];
  }
  return y;
}

Vec linear_ref(const Vec& x, const Vec& w, const Vec* b, int M, int K, int N) {
  Vec y(static_cast<size_t>(M * N));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = b ? (*b)[j] : 0.0;
      for (int k = 0; k < K; ++k) s += x[i * K + k] * w[j * K + k];
      y[i * N + j] = s;
    }
  return y;
}

// HF Llama rotate_half: pairs (i, i + hd/2) rotate by pos * theta^(-2i/hd).
Vec rope_ref(const Vec& x, int B, int S, int width, int hd, double theta) {
  Vec y(x.size());
  const int half = hd / 2;
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < width; h += hd)
        for (int i = 0; i < half; ++i) {
          const double a = s * std::pow(theta, -2.0 * i / hd);
          const size_t base = (static_cast<size_t>(b) * S + s) * width + h;
          const double x1 = x[base + i], x2 = x[base + i + half];
          y[base + i] = x1 * std::cos(a) - x2 * std::sin(a);
          y[base + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
  return y;
}

}  // namespace

// ------------------------------------------------------------------ RMSNorm
RC_GTEST_PROP(KernelsRMSNorm, ForwardAndBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 7), D = *rc::gen::inRange(1, 18);
  const double eps = 1e-5;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = norm_input(dt, R, D, rng), w = random_tensor(dt, {D}, rng, 0.5, 1.5);
  HT y(dt, {R, D}), rstd(DType::kFloat32, {R});
  run(OpKind::kRMSNorm, {&x, &w}, {&y, &rstd}, {}, {eps});
  Vec ers;
  const Vec xv = x.values(), wv = w.values();
  const Vec ey = rms_ref(xv, wv, R, D, eps, &ers);
  KT_RC_CLOSE(y.values(), ey, 1e-5, rel_eps(dt) + 1e-5);
  KT_RC_CLOSE(rstd.values(), ers, 0, 1e-6);
  // Backward: (g, x, rstd, w) -> (grad_x, grad_w).
  HT g = random_tensor(dt, {R, D}, rng), gx(dt, {R, D}), gw(dt, {D});
  run(OpKind::kRMSNormBackward, {&g, &x, &rstd, &w}, {&gx, &gw});
  const Vec gv = g.values();
  const Vec ex = fd_grad([&](const Vec& v) { return rms_ref(v, wv, R, D, eps); }, xv, gv);
  const Vec ew = fd_grad([&](const Vec& v) { return rms_ref(xv, v, R, D, eps); }, wv, gv);
  KT_RC_CLOSE(gx.values(), ex, 1e-4 * (1 + max_abs(ex)), rel_eps(dt) + 1e-4);
  KT_RC_CLOSE(gw.values(), ew, 1e-4 * (1 + max_abs(ew)), rel_eps(dt) + 1e-4);
}

TEST(KernelsRMSNorm, KnownValues) {
  // x = [3, 4]: mean square 12.5, rstd = 1/sqrt(12.5 + eps).
  HT x = from_values(DType::kFloat32, {1, 2}, {3, 4}),
     w = from_values(DType::kFloat32, {2}, {1, 2});
  HT y(DType::kFloat32, {1, 2}), rstd(DType::kFloat32, {1});
  run(OpKind::kRMSNorm, {&x, &w}, {&y, &rstd}, {}, {0.0});
  EXPECT_NEAR(rstd.get(0), 1 / std::sqrt(12.5), 1e-7);
  EXPECT_NEAR(y.get(0), 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y.get(1), 8 / std::sqrt(12.5), 1e-6);
}

// ------------------------------------------------------------------ LayerNorm
RC_GTEST_PROP(KernelsLayerNorm, ForwardAndBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 7), D = *rc::gen::inRange(1, 18);
  const double eps = 1e-5;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = norm_input(dt, R, D, rng), w = random_tensor(dt, {D}, rng, 0.5, 1.5),
     b = random_tensor(dt, {D}, rng);
  HT y(dt, {R, D}), mean(DType::kFloat32, {R}), rstd(DType::kFloat32, {R});
  run(OpKind::kLayerNorm, {&x, &w, &b}, {&y, &mean, &rstd}, {}, {eps});
  Vec em, ers;
  const Vec xv = x.values(), wv = w.values(), bv = b.values();
  const Vec ey = ln_ref(xv, wv, bv, R, D, eps, &em, &ers);
  KT_RC_CLOSE(y.values(), ey, 1e-5, rel_eps(dt) + 1e-5);
  KT_RC_CLOSE(mean.values(), em, 1e-7, 1e-6);
  KT_RC_CLOSE(rstd.values(), ers, 0, 1e-5);
  // Backward: (g, x, mean, rstd, w) -> (grad_x, grad_w, grad_b).
  HT g = random_tensor(dt, {R, D}, rng), gx(dt, {R, D}), gw(dt, {D}), gb(dt, {D});
  run(OpKind::kLayerNormBackward, {&g, &x, &mean, &rstd, &w}, {&gx, &gw, &gb});
  const Vec gv = g.values();
  const Vec ex = fd_grad([&](const Vec& v) { return ln_ref(v, wv, bv, R, D, eps); }, xv, gv);
  const Vec ew = fd_grad([&](const Vec& v) { return ln_ref(xv, v, bv, R, D, eps); }, wv, gv);
  const Vec eb = fd_grad([&](const Vec& v) { return ln_ref(xv, wv, v, R, D, eps); }, bv, gv);
  KT_RC_CLOSE(gx.values(), ex, 1e-4 * (1 + max_abs(ex)), rel_eps(dt) + 1e-4);
  KT_RC_CLOSE(gw.values(), ew, 1e-4 * (1 + max_abs(ew)), rel_eps(dt) + 1e-4);
  KT_RC_CLOSE(gb.values(), eb, 1e-4 * (1 + max_abs(eb)), rel_eps(dt) + 1e-4);
}

// ------------------------------------------------------------------ linear
RC_GTEST_PROP(KernelsLinear, ForwardAndAllGradients, ()) {
  const DType dt = *gen_float_dtype();
  const int M = *rc::gen::inRange(1, 10), K = *rc::gen::inRange(1, 10),
            N = *rc::gen::inRange(1, 10);
  const bool with_bias = *rc::gen::arbitrary<bool>();
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {M, K}, rng), w = random_tensor(dt, {N, K}, rng),
     b = random_tensor(dt, {N}, rng);
  HT y(dt, {M, N});
  std::vector<HT*> ins = {&x, &w};
  if (with_bias) ins.push_back(&b);
  run(OpKind::kLinear, ins, {&y}, {M, K, N});
  const Vec xv = x.values(), wv = w.values(), bv = b.values();
  const Vec* bp = with_bias ? &bv : nullptr;
  KT_RC_CLOSE(y.values(), linear_ref(xv, wv, bp, M, K, N), 1e-5, rel_eps(dt) + 1e-5);
  HT g = random_tensor(dt, {M, N}, rng), gx(dt, {M, K}), gw(dt, {N, K}), gb(dt, {N});
  run(OpKind::kLinearBackwardInput, {&g, &w}, {&gx}, {M, K, N});
  run(OpKind::kLinearBackwardWeight, {&g, &x}, {&gw}, {M, K, N});
  run(OpKind::kLinearBackwardBias, {&g}, {&gb}, {M, N});
  const Vec gv = g.values();
  KT_RC_CLOSE(gx.values(),
              fd_grad([&](const Vec& v) { return linear_ref(v, wv, bp, M, K, N); }, xv, gv), 1e-5,
              rel_eps(dt) + 1e-5);
  KT_RC_CLOSE(gw.values(),
              fd_grad([&](const Vec& v) { return linear_ref(xv, v, bp, M, K, N); }, wv, gv), 1e-5,
              rel_eps(dt) + 1e-5);
  KT_RC_CLOSE(gb.values(),
              fd_grad([&](const Vec& v) { return linear_ref(xv, wv, &v, M, K, N); }, bv, gv), 1e-5,
              rel_eps(dt) + 1e-5);
}

TEST(KernelsLinear, WeightIsOutByInAndLargeShapesUseBlas) {
  // y = x W^T + b with W [N=2, K=3] as nn.Linear stores it.
  HT x = from_values(DType::kFloat32, {1, 3}, {1, 2, 3});
  HT w = from_values(DType::kFloat32, {2, 3}, {1, 0, 0, 0, 1, 1}),
     b = from_values(DType::kFloat32, {2}, {10, 20});
  HT y(DType::kFloat32, {1, 2});
  run(OpKind::kLinear, {&x, &w, &b}, {&y}, {1, 3, 2});
  EXPECT_EQ(y.values(), (Vec{11, 25}));
  // Shapes past BLAS's small-matrix paths, 3-D input ([B, S, K] flattens to M = B*S).
  std::mt19937 rng(3);
  const int M = 70, K = 65, N = 33;
  HT X = random_tensor(DType::kFloat32, {2, 35, K}, rng),
     W = random_tensor(DType::kFloat32, {N, K}, rng);
  HT Y(DType::kFloat32, {2, 35, N});
  run(OpKind::kLinear, {&X, &W}, {&Y}, {M, K, N});
  KT_EXPECT_CLOSE(Y.values(), linear_ref(X.values(), W.values(), nullptr, M, K, N), 1e-5, 1e-5);
  HT G = random_tensor(DType::kFloat32, {2, 35, N}, rng), GW(DType::kFloat32, {N, K});
  run(OpKind::kLinearBackwardWeight, {&G, &X}, {&GW}, {M, K, N});
  Vec e(static_cast<size_t>(N * K), 0.0);
  const Vec gv = G.values(), xv = X.values();
  for (int i = 0; i < M; ++i)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) e[n * K + k] += gv[i * N + n] * xv[i * K + k];
  KT_EXPECT_CLOSE(GW.values(), e, 1e-5, 1e-5);
  // Shape checks against iargs.
  EXPECT_THROW(run(OpKind::kLinear, {&X, &W}, {&Y}, {M, K + 1, N}), InternalError);
}

// ------------------------------------------------------------------ RoPE
TEST(KernelsRoPE, RotateHalfConvention) {
  // hd = 4: element i pairs with i + 2; at position 1 pair 0 rotates by 1 rad and pair 1 by
  // theta^(-1/2) = 0.01 rad (theta = 10^4). Position 0 is the identity.
  HT x = from_values(DType::kFloat32, {1, 2, 4}, {1, 2, 3, 4, 1, 1, 0, 0}),
     y(DType::kFloat32, {1, 2, 4});
  run(OpKind::kRoPE, {&x}, {&y}, {4}, {10000.0});
  EXPECT_EQ(y.get(0), 1);
  EXPECT_EQ(y.get(3), 4);
  EXPECT_NEAR(y.get(4), std::cos(1.0), 1e-7);
  EXPECT_NEAR(y.get(5), std::cos(0.01), 1e-7);
  EXPECT_NEAR(y.get(6), std::sin(1.0), 1e-7);
  EXPECT_NEAR(y.get(7), std::sin(0.01), 1e-7);
}

RC_GTEST_PROP(KernelsRoPE, ForwardAndBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int B = *rc::gen::inRange(1, 3), S = *rc::gen::inRange(1, 9), H = *rc::gen::inRange(1, 4);
  const int hd = 2 * *rc::gen::inRange(1, 5);
  const double theta = *rc::gen::element(10000.0, 500000.0);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {B, S, H * hd}, rng), y(dt, {B, S, H * hd});
  run(OpKind::kRoPE, {&x}, {&y}, {hd}, {theta});
  const Vec xv = x.values();
  KT_RC_CLOSE(y.values(), rope_ref(xv, B, S, H * hd, hd, theta), 1e-6, rel_eps(dt) + 1e-6);
  HT g = random_tensor(dt, {B, S, H * hd}, rng), gx(dt, {B, S, H * hd});
  run(OpKind::kRoPEBackward, {&g}, {&gx}, {hd}, {theta});
  const Vec e =
      fd_grad([&](const Vec& v) { return rope_ref(v, B, S, H * hd, hd, theta); }, xv, g.values());
  KT_RC_CLOSE(gx.values(), e, 1e-5, rel_eps(dt) + 1e-5);
}
