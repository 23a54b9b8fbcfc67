// CPU kernels: causal attention with GQA (separate q/k/v and GPT-2's packed qkv), forward
// and backward; log_softmax and nll_loss, forward and backward. References are naive
// double-precision loops; backwards are checked by central finite differences (h = 1e-5)
// of sum(g * f(...)) on small shapes, and, past the kernel's 128-row query block, against an
// analytical double backward that is itself checked against finite differences here.
// Tolerances: fp32 1e-5 (abs, scaled by the gradient's magnitude); bf16 / fp16 a few output
// roundings, since O is stored rounded and the backward reads it back.
#include <algorithm>
#include <limits>

#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

struct Dims {
  int B, S, H, Hkv, hd;
  int D() const { return H * hd; }
  int Dkv() const { return Hkv * hd; }
};

// o [B, S, H*hd], lse [B, H, S]: softmax(scale q k^T, causal) v, kv head h / (H / Hkv).
Vec attn_ref(const Dims& d, const Vec& q, const Vec& k, const Vec& v, Vec* lse = nullptr) {
  Vec o(static_cast<size_t>(d.B * d.S * d.D()), 0.0);
  if (lse) lse->assign(static_cast<size_t>(d.B * d.H * d.S), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(d.hd));
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h) {
      const int g = h / (d.H / d.Hkv);
      for (int i = 0; i < d.S; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int e = 0; e < d.hd; ++e)
            dot +=
                q[(b * d.S + i) * d.D() + h * d.hd + e] * k[(b * d.S + j) * d.Dkv() + g * d.hd + e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(s[j] - mx);
        if (lse) (*lse)[(b * d.H + h) * d.S + i] = mx + std::log(z);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - mx) / z;
          for (int e = 0; e < d.hd; ++e)
            o[(b * d.S + i) * d.D() + h * d.hd + e] +=
                p * v[(b * d.S + j) * d.Dkv() + g * d.hd + e];
        }
      }
    }
  return o;
}

// Analytical backward in double: dq, dk, dv of sum(dO * attn(q, k, v)).
void attn_bwd_ref(const Dims& d, const Vec& q, const Vec& k, const Vec& v, const Vec& dout, Vec& dq,
                  Vec& dk, Vec& dv) {
  const Vec o = attn_ref(d, q, k, v);
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(d.hd));
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h) {
      const int g = h / (d.H / d.Hkv);
      auto Q = [&](int i, int e) { return q[(b * d.S + i) * d.D() + h * d.hd + e]; };
      auto K = [&](int j, int e) { return k[(b * d.S + j) * d.Dkv() + g * d.hd + e]; };
      auto V = [&](int j, int e) { return v[(b * d.S + j) * d.Dkv() + g * d.hd + e]; };
      auto dO = [&](int i, int e) { return dout[(b * d.S + i) * d.D() + h * d.hd + e]; };
      for (int i = 0; i < d.S; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        double mx = -1e300, z = 0, delta = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int e = 0; e < d.hd; ++e) dot += Q(i, e) * K(j, e);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= i; ++j) z += std::exp(s[j] - mx);
        for (int e = 0; e < d.hd; ++e) delta += dO(i, e) * o[(b * d.S + i) * d.D() + h * d.hd + e];
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - mx) / z;
          double dp = 0;
          for (int e = 0; e < d.hd; ++e) dp += dO(i, e) * V(j, e);
          const double ds = p * (dp - delta) * scale;
          for (int e = 0; e < d.hd; ++e) {
            dq[(b * d.S + i) * d.D() + h * d.hd + e] += ds * K(j, e);
            dk[(b * d.S + j) * d.Dkv() + g * d.hd + e] += ds * Q(i, e);
            dv[(b * d.S + j) * d.Dkv() + g * d.hd + e] += p * dO(i, e);
          }
        }
      }
    }
}

std::vector<int64_t> attn_iargs(const Dims& d, int packed) {
  return {d.B, d.S, d.H, d.Hkv, d.hd, packed};
}

// The flash backward's two scratch outputs the model appends to (dq, dk, dv) (softmax_d and
// dq_accum, core/model/ops.cc flash_bwd_temps; the op table wants them), which the CPU kernel
// ignores.
struct FlashScratch {
  HT softmax_d, dq_accum;
  explicit FlashScratch(const Dims& d)
      : softmax_d(DType::kFloat32, {d.B, d.H, (d.S + 127) / 128 * 128}),
        dq_accum(DType::kFloat32, {d.B, (d.S + 127) / 128 * 128, d.H, (d.hd + 31) / 32 * 32}) {}
};

// fp32 math error plus `n` roundings of the storage dtype, relative to the result's scale.
double tol(DType dt, const Vec& e, double n = 1) {
  return (1e-5 + n * rel_eps(dt)) * (1 + max_abs(e));
}

}  // namespace

// ------------------------------------------------------------------ attention
RC_GTEST_PROP(KernelsAttention, ForwardAndBackwardWithGqa, ()) {
  const DType dt = *gen_float_dtype();
  const int Hkv = *rc::gen::inRange(1, 3), rep = *rc::gen::element(1, 2, 3);
  const Dims d{*rc::gen::inRange(1, 3), *rc::gen::inRange(1, 8), Hkv * rep, Hkv,
               *rc::gen::inRange(1, 6)};
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT q = random_tensor(dt, {d.B, d.S, d.D()}, rng, -2, 2);
  HT k = random_tensor(dt, {d.B, d.S, d.Dkv()}, rng, -2, 2),
     v = random_tensor(dt, {d.B, d.S, d.Dkv()}, rng);
  HT o(dt, {d.B, d.S, d.H, d.hd}), lse(DType::kFloat32, {d.B, d.H, d.S});
  run(OpKind::kAttention, {&q, &k, &v}, {&o, &lse}, attn_iargs(d, 0));
  const Vec qv = q.values(), kv = k.values(), vv = v.values();
  Vec else_;
  const Vec eo = attn_ref(d, qv, kv, vv, &else_);
  KT_RC_CLOSE(o.values(), eo, tol(dt, eo), rel_eps(dt));
  KT_RC_CLOSE(lse.values(), else_, 1e-5 * (1 + max_abs(else_)), 0);
  // Backward: (dO, q, k, v, O, lse) -> (dq, dk, dv), vs finite differences.
  HT g = random_tensor(dt, {d.B, d.S, d.H, d.hd}, rng), dq(dt, q.meta.shape), dk(dt, k.meta.shape),
     dv(dt, v.meta.shape);
  FlashScratch fs(d);
  run(OpKind::kAttentionBackward, {&g, &q, &k, &v, &o, &lse},
      {&dq, &dk, &dv, &fs.softmax_d, &fs.dq_accum}, attn_iargs(d, 0));
  const Vec gv = g.values();
  const Vec eq = fd_grad([&](const Vec& x) { return attn_ref(d, x, kv, vv); }, qv, gv);
  const Vec ek = fd_grad([&](const Vec& x) { return attn_ref(d, qv, x, vv); }, kv, gv);
  const Vec ev = fd_grad([&](const Vec& x) { return attn_ref(d, qv, kv, x); }, vv, gv);
  // O read back rounded enters every gradient through delta = dO . O: a few roundings.
  KT_RC_CLOSE(dq.values(), eq, tol(dt, eq, 4), rel_eps(dt));
  KT_RC_CLOSE(dk.values(), ek, tol(dt, ek, 4), rel_eps(dt));
  KT_RC_CLOSE(dv.values(), ev, tol(dt, ev, 2), rel_eps(dt));
}

// Multi-head latent attention (core/model/mla_attention.cc): v's head size vd differs from q /
// k's, and the op carries its own softmax scale (AttentionArgs: iargs[11], fargs {scale}).
// Reference: softmax(scale q k^T, causal) v in double, per head, MHA.
Vec mla_ref(int B, int S, int H, int hd, int vd, double scale, const Vec& q, const Vec& k,
            const Vec& v) {
  Vec o(static_cast<size_t>(B * S * H * vd), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i) {
        Vec sc(static_cast<size_t>(i + 1));
        double mx = -1e300, z = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int e = 0; e < hd; ++e)
            dot += q[((b * S + i) * H + h) * hd + e] * k[((b * S + j) * H + h) * hd + e];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        for (int j = 0; j <= i; ++j) z += std::exp(sc[j] - mx);
        for (int j = 0; j <= i; ++j)
          for (int e = 0; e < vd; ++e)
            o[((b * S + i) * H + h) * vd + e] +=
                std::exp(sc[j] - mx) / z * v[((b * S + j) * H + h) * vd + e];
      }
  return o;
}

RC_GTEST_PROP(KernelsAttention, MlaVHeadSizeAndScale, ()) {
  const DType dt = *gen_float_dtype();
  const int B = *rc::gen::inRange(1, 3), S = *rc::gen::inRange(1, 7), H = *rc::gen::inRange(1, 4);
  const int hd = *rc::gen::inRange(1, 7), vd = *rc::gen::inRange(1, 7);
  const double scale = *rc::gen::element(0.25, 0.7, 1.3);
  const OpKind fwd = vd == hd ? *rc::gen::element(OpKind::kAttention, OpKind::kAttentionEfficient)
                              : OpKind::kAttentionEfficient;
  const int lse_len = fwd == OpKind::kAttentionEfficient ? (S + 31) / 32 * 32 : S;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT q = random_tensor(dt, {B, S, H * hd}, rng, -2, 2),
     k = random_tensor(dt, {B, S, H * hd}, rng, -2, 2);
  HT v = random_tensor(dt, {B, S, H * vd}, rng);
  HT o(dt, {B, S, H, vd}), lse(DType::kFloat32, {B, H, lse_len});
  // {B, S, H, Hkv, hd, packed, lse_len, kv_seq, causal, q rows, kv rows, vd}, fargs {scale}
  const std::vector<int64_t> ia = {B, S, H, H, hd, 0, lse_len, S, 1, S, S, vd};
  run(fwd, {&q, &k, &v}, {&o, &lse}, ia, {scale});
  const Vec qv = q.values(), kv = k.values(), vv = v.values();
  const Vec eo = mla_ref(B, S, H, hd, vd, scale, qv, kv, vv);
  KT_RC_CLOSE(o.values(), eo, tol(dt, eo), rel_eps(dt));
  HT g = random_tensor(dt, {B, S, H, vd}, rng), dq(dt, q.meta.shape), dk(dt, k.meta.shape),
     dv(dt, v.meta.shape);
  if (fwd == OpKind::kAttention) {
    FlashScratch fs(Dims{B, S, H, H, hd});
    run(OpKind::kAttentionBackward, {&g, &q, &k, &v, &o, &lse},
        {&dq, &dk, &dv, &fs.softmax_d, &fs.dq_accum}, ia, {scale});
  } else {  // efficient: delta and the dq workspace are GPU scratch the kernel ignores
    HT delta(DType::kFloat32, {B, H, S}), ws(DType::kFloat32, {1});
    run(OpKind::kAttentionEfficientBackward, {&g, &q, &k, &v, &o, &lse},
        {&dq, &dk, &dv, &delta, &ws}, ia, {scale});
  }
  const Vec gv = g.values();
  const auto f = [&](const Vec& a, const Vec& b, const Vec& c) {
    return mla_ref(B, S, H, hd, vd, scale, a, b, c);
  };
  const Vec eq = fd_grad([&](const Vec& x) { return f(x, kv, vv); }, qv, gv);
  const Vec ek = fd_grad([&](const Vec& x) { return f(qv, x, vv); }, kv, gv);
  const Vec ev = fd_grad([&](const Vec& x) { return f(qv, kv, x); }, vv, gv);
  KT_RC_CLOSE(dq.values(), eq, tol(dt, eq, 4), rel_eps(dt));
  KT_RC_CLOSE(dk.values(), ek, tol(dt, ek, 4), rel_eps(dt));
  KT_RC_CLOSE(dv.values(), ev, tol(dt, ev, 2), rel_eps(dt));
}

TEST(KernelsAttention, AnalyticalReferenceMatchesFiniteDifferences) {
  const Dims d{2, 5, 4, 2, 3};
  std::mt19937 rng(11);
  const Vec q = random_vec(d.B * d.S * d.D(), rng), k = random_vec(d.B * d.S * d.Dkv(), rng);
  const Vec v = random_vec(d.B * d.S * d.Dkv(), rng), g = random_vec(d.B * d.S * d.D(), rng);
  Vec dq, dk, dv;
  attn_bwd_ref(d, q, k, v, g, dq, dk, dv);
  KT_EXPECT_CLOSE(dq, fd_grad([&](const Vec& x) { return attn_ref(d, x, k, v); }, q, g), 1e-8,
                  1e-6);
  KT_EXPECT_CLOSE(dk, fd_grad([&](const Vec& x) { return attn_ref(d, q, x, v); }, k, g), 1e-8,
                  1e-6);
  KT_EXPECT_CLOSE(dv, fd_grad([&](const Vec& x) { return attn_ref(d, q, k, x); }, v, g), 1e-8,
                  1e-6);
}

TEST(KernelsAttention, LongSequenceCrossesQueryBlocks) {
  // S = 300 spans three 128-row query blocks; GQA 4:2; fp32.
  const Dims d{1, 300, 4, 2, 8};
  std::mt19937 rng(5);
  HT q = random_tensor(DType::kFloat32, {d.B, d.S, d.D()}, rng, -2, 2);
  HT k = random_tensor(DType::kFloat32, {d.B, d.S, d.Dkv()}, rng, -2, 2);
  HT v = random_tensor(DType::kFloat32, {d.B, d.S, d.Dkv()}, rng);
  HT o(DType::kFloat32, {d.B, d.S, d.H, d.hd}), lse(DType::kFloat32, {d.B, d.H, d.S});
  run(OpKind::kAttention, {&q, &k, &v}, {&o, &lse}, attn_iargs(d, 0));
  Vec else_;
  KT_EXPECT_CLOSE(o.values(), attn_ref(d, q.values(), k.values(), v.values(), &else_), 1e-5, 1e-5);
  KT_EXPECT_CLOSE(lse.values(), else_, 1e-5, 1e-6);
  HT g = random_tensor(DType::kFloat32, {d.B, d.S, d.H, d.hd}, rng);
  HT dq(DType::kFloat32, q.meta.shape), dk(DType::kFloat32, k.meta.shape),
      dv(DType::kFloat32, v.meta.shape);
  FlashScratch fs(d);
  run(OpKind::kAttentionBackward, {&g, &q, &k, &v, &o, &lse},
      {&dq, &dk, &dv, &fs.softmax_d, &fs.dq_accum}, attn_iargs(d, 0));
  Vec eq, ek, ev;
  attn_bwd_ref(d, q.values(), k.values(), v.values(), g.values(), eq, ek, ev);
  KT_EXPECT_CLOSE(dq.values(), eq, 1e-4, 1e-4);
  KT_EXPECT_CLOSE(dk.values(), ek, 1e-4, 1e-4);
  KT_EXPECT_CLOSE(dv.values(), ev, 1e-4, 1e-4);
}

TEST(KernelsAttention, CausalFirstRowCopiesV) {
  // Row 0 attends only to key 0: o[0] = v[0] and lse[0] = scale * q0 . k0.
  const Dims d{1, 3, 1, 1, 2};
  HT q = from_values(DType::kFloat32, {1, 3, 2}, {1, 2, 0, 0, 0, 0});
  HT k = from_values(DType::kFloat32, {1, 3, 2}, {3, 4, 9, 9, 9, 9});
  HT v = from_values(DType::kFloat32, {1, 3, 2}, {5, 6, 7, 8, 1, 1});
  HT o(DType::kFloat32, {1, 3, 1, 2}), lse(DType::kFloat32, {1, 1, 3});
  run(OpKind::kAttention, {&q, &k, &v}, {&o, &lse}, attn_iargs(d, 0));
  EXPECT_EQ(o.get(0), 5);
  EXPECT_EQ(o.get(1), 6);
  EXPECT_NEAR(lse.get(0), 11 / std::sqrt(2.0), 1e-6);
  // Row 1 has q = 0: uniform over keys 0, 1: o = (v0 + v1) / 2, lse = log 2.
  EXPECT_NEAR(o.get(2), 6, 1e-6);
  EXPECT_NEAR(o.get(3), 7, 1e-6);
  EXPECT_NEAR(lse.get(1), std::log(2.0), 1e-6);
}

RC_GTEST_PROP(KernelsAttention, PackedQkvMatchesSeparate, ()) {
  const DType dt = *gen_float_dtype();
  const int H = *rc::gen::inRange(1, 4);
  const Dims d{*rc::gen::inRange(1, 3), *rc::gen::inRange(1, 10), H, H, *rc::gen::inRange(1, 6)};
  const int D = d.D();
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT qkv = random_tensor(dt, {d.B, d.S, 3 * D}, rng, -2, 2);
  HT q(dt, {d.B, d.S, D}), k(dt, {d.B, d.S, D}), v(dt, {d.B, d.S, D});
  for (int t = 0; t < d.B * d.S; ++t)
    for (int c = 0; c < D; ++c) {
      q.set(t * D + c, qkv.get(t * 3 * D + c));
      k.set(t * D + c, qkv.get(t * 3 * D + D + c));
      v.set(t * D + c, qkv.get(t * 3 * D + 2 * D + c));
    }
  HT o1(dt, {d.B, d.S, H, d.hd}), l1(DType::kFloat32, {d.B, H, d.S}), o2 = o1, l2 = l1;
  run(OpKind::kAttention, {&q, &k, &v}, {&o1, &l1}, attn_iargs(d, 0));
  run(OpKind::kAttention, {&qkv}, {&o2, &l2}, attn_iargs(d, 1));
  KT_RC_CLOSE(o2.values(), o1.values(), 1e-6, 1e-6);
  KT_RC_CLOSE(l2.values(), l1.values(), 1e-6, 1e-6);
  HT g = random_tensor(dt, {d.B, d.S, H, d.hd}, rng);
  HT dq1(dt, q.meta.shape), dk1 = dq1, dv1 = dq1, dq2 = dq1, dk2 = dq1, dv2 = dq1;
  FlashScratch fs(d);
  run(OpKind::kAttentionBackward, {&g, &q, &k, &v, &o1, &l1},
      {&dq1, &dk1, &dv1, &fs.softmax_d, &fs.dq_accum}, attn_iargs(d, 0));
  run(OpKind::kAttentionBackward, {&g, &qkv, &o2, &l2},
      {&dq2, &dk2, &dv2, &fs.softmax_d, &fs.dq_accum}, attn_iargs(d, 1));
  KT_RC_CLOSE(dq2.values(), dq1.values(), 1e-6, 1e-6);
  KT_RC_CLOSE(dk2.values(), dk1.values(), 1e-6, 1e-6);
  KT_RC_CLOSE(dv2.values(), dv1.values(), 1e-6, 1e-6);
}

// ------------------------------------------------------------------ log_softmax / nll_loss
namespace {
Vec log_softmax_ref(const Vec& x, int R, int V) {
  Vec y(x.size());
  for (int r = 0; r < R; ++r) {
    double mx = -1e300, z = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, x[r * V + j]);
    for (int j = 0; j < V; ++j) z += std::exp(x[r * V + j] - mx);
    for (int j = 0; j < V; ++j) y[r * V + j] = x[r * V + j] - mx - std::log(z);
  }
  return y;
}
Vec nll_ref(const Vec& lp, const Vec& labels, int R, int V) {
  double s = 0;
  int n = 0;
  for (int r = 0; r < R; ++r)
    if (labels[r] != -100) {
      s += lp[r * V + static_cast<int>(labels[r])];
      ++n;
    }
  return {-s / n};
}
}  // namespace

RC_GTEST_PROP(KernelsLoss, LogSoftmaxForwardAndBackward, ()) {
  const DType in_dt = *gen_float_dtype();
  const int R = *rc::gen::inRange(1, 6), V = *rc::gen::inRange(1, 40);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(in_dt, {R, V}, rng, -20, 20), y(DType::kFloat32, {R, V});
  run(OpKind::kLogSoftmax, {&x}, {&y});
  const Vec xv = x.values();
  KT_RC_CLOSE(y.values(), log_softmax_ref(xv, R, V), 1e-5, 1e-6);
  HT g = random_tensor(DType::kFloat32, {R, V}, rng), gx(DType::kFloat32, {R, V});
  run(OpKind::kLogSoftmaxBackward, {&g, &y}, {&gx});
  const Vec e = fd_grad([&](const Vec& v) { return log_softmax_ref(v, R, V); }, xv, g.values());
  KT_RC_CLOSE(gx.values(), e, 1e-5 * (1 + max_abs(e)), 1e-5);
}

RC_GTEST_PROP(KernelsLoss, NllLossMeanWithIgnoreIndex, ()) {
  const int R = *rc::gen::inRange(1, 8), V = *rc::gen::inRange(1, 12);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT lp = random_tensor(DType::kFloat32, {R, V}, rng, -5, 0), labels(DType::kInt64, {R});
  std::uniform_int_distribution<int> pick(0, V - 1);
  for (int r = 0; r < R; ++r)
    labels.set(r, r > 0 && rng() % 4 == 0 ? -100 : pick(rng));  // row 0 counts
  HT loss(DType::kFloat32, {}), tw(DType::kFloat32, {});
  run(OpKind::kNllLoss, {&lp, &labels}, {&loss, &tw});
  const Vec lv = labels.values();
  const int counted =
      static_cast<int>(std::count_if(lv.begin(), lv.end(), [](double l) { return l != -100; }));
  RC_ASSERT(tw.get(0) == counted);
  KT_RC_CLOSE(loss.values(), nll_ref(lp.values(), lv, R, V), 1e-6, 1e-6);
  // Backward: grad_lp = -g / total_weight at each counted label, 0 elsewhere.
  HT g = from_values(DType::kFloat32, {}, {0.75}), glp(DType::kFloat32, {R, V});
  for (auto& m : glp.mem) m = ~0ull;
  run(OpKind::kNllLossBackward, {&g, &labels, &tw}, {&glp});
  const Vec e = fd_grad([&](const Vec& v) { return nll_ref(v, lv, R, V); }, lp.values(), {0.75});
  KT_RC_CLOSE(glp.values(), e, 1e-7, 1e-6);
}

TEST(KernelsLoss, CrossEntropyChainGivesSoftmaxMinusOneHot) {
  // log_softmax -> nll_loss -> backward of both: grad = (softmax - onehot) / N.
  const int R = 3, V = 5;
  std::mt19937 rng(9);
  HT x = random_tensor(DType::kFloat32, {R, V}, rng, -3, 3), lp(DType::kFloat32, {R, V});
  HT labels = from_values(DType::kInt64, {R}, {4, 0, 2});
  HT loss(DType::kFloat32, {}), tw(DType::kFloat32, {}),
      seed = from_values(DType::kFloat32, {}, {1.0});
  run(OpKind::kLogSoftmax, {&x}, {&lp});
  run(OpKind::kNllLoss, {&lp, &labels}, {&loss, &tw});
  HT glp(DType::kFloat32, {R, V}), gx(DType::kFloat32, {R, V});
  run(OpKind::kNllLossBackward, {&seed, &labels, &tw}, {&glp});
  run(OpKind::kLogSoftmaxBackward, {&glp, &lp}, {&gx});
  const Vec ls = log_softmax_ref(x.values(), R, V);
  Vec e(R * V);
  double l = 0;
  for (int r = 0; r < R; ++r) {
    const int y = static_cast<int>(labels.get(r));
    l -= ls[r * V + y] / R;
    for (int j = 0; j < V; ++j) e[r * V + j] = (std::exp(ls[r * V + j]) - (j == y ? 1 : 0)) / R;
  }
  EXPECT_NEAR(loss.get(0), l, 1e-6);
  EXPECT_EQ(tw.get(0), 3);
  KT_EXPECT_CLOSE(gx.values(), e, 1e-7, 1e-5);
}

TEST(KernelsLoss, AllIgnoredGivesNaNAndBadLabelThrows) {
  HT lp(DType::kFloat32, {2, 3}), labels = from_values(DType::kInt64, {2}, {-100, -100});
  HT loss(DType::kFloat32, {}), tw(DType::kFloat32, {});
  run(OpKind::kNllLoss, {&lp, &labels}, {&loss, &tw});
  EXPECT_TRUE(std::isnan(loss.get(0)));
  EXPECT_EQ(tw.get(0), 0);
  labels.set(0, 3);
  EXPECT_THROW(run(OpKind::kNllLoss, {&lp, &labels}, {&loss, &tw}), InternalError);
}
