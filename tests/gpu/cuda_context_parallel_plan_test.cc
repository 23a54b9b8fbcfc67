// Host-only (no GPU): context parallelism's kernels on the CUDA backend as far as the host decides
// them (backends/cuda/kernels/context_parallel_plan.h, context_parallel_dispatch.cc): has_kernel
// lists the cp kinds and the split RMSNorm backward; a ring round (strided halves of the local
// sequence, as core/model/ring_attention.cc launches them) is planned with the strides and
// offsets that, walked here by the kernels' algorithm (one query row's online softmax; dq by
// query row and dk / dv by key row), give what the CPU kernels give; kSdpaMerge and kSeqRowsAdd
// likewise; and the plans refuse what the kernels cannot run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/context_parallel_plan.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "core/common/error.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/context_parallel_args.h"
#include "core/runtime/cp_layout.h"

namespace fullshard::cuda {
namespace {

using F = std::vector<float>;

F random(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  F v(n);
  for (float& x : v) x = u(rng);
  return v;
}
TensorRef ref(Shape s, DType d = DType::kFloat32) { return TensorRef{0, 0, TensorMeta{d, s}}; }
void expect_near(const F& a, const F& e, float tol, const std::string& what) {
  ASSERT_EQ(a.size(), e.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], e[i], tol * (1 + std::fabs(e[i]))) << what << " element " << i;
}
std::string refusal(OpCall op, RingAttnLayout (*plan)(const OpCall&)) {
  try {
    plan(op);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaContextParallelPlan, HasKernelListsTheCpAndSplitBackwardKinds) {
  for (OpKind k : {OpKind::kSdpaMerge, OpKind::kSeqRowsAdd, OpKind::kRMSNormBackwardInput,
                   OpKind::kRMSNormBackwardWeight}) {
    EXPECT_TRUE(has_kernel(k)) << op_kind_name(k);
    OpCall op;
    op.kind = k;
    op.name = "probe";
    std::string message;
    try {
      launch_kernel(op, {}, {}, KernelContext{});
    } catch (const std::exception& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("probe"), std::string::npos) << op_kind_name(k) << ": " << message;
    EXPECT_EQ(message.find("no CUDA kernel"), std::string::npos) << message;
  }
}

// One ring round of rank r (NOTE [Ring attention rounds]) over local sequences of L tokens.
struct Round {
  int64_t B, L, H, Hkv, hd;
  CpRound rd;
  int64_t D() const { return H * hd; }
  int64_t Dkv() const { return Hkv * hd; }
  AttentionArgs args() const {
    AttentionArgs a;  // as ring_attention.cc's round_args
    a.batch = B, a.seq = rd.q_len, a.heads = H, a.kv_heads = Hkv, a.head_dim = hd;
    a.lse_len = rd.q_len, a.kv_seq = rd.kv_len, a.causal = rd.causal;
    a.q_batch_rows = L, a.kv_batch_rows = L;
    return a;
  }
  OpCall forward_op() const {
    OpCall op;
    op.kind = OpKind::kAttention;
    op.name = "round";
    op.inputs = {ref({B, rd.q_len, D()}), ref({B, rd.kv_len, Dkv()}), ref({B, rd.kv_len, Dkv()})};
    op.outputs = {ref({B, rd.q_len, D()}), ref({B, H, rd.q_len})};
    args().encode(op);
    return op;
  }
  OpCall backward_op() const {
    OpCall op;
    op.kind = OpKind::kAttentionBackward;
    op.name = "round backward";
    const int64_t sr = (rd.q_len + 127) / 128 * 128;
    op.inputs = {ref({B, rd.q_len, D()}),    ref({B, rd.q_len, D()}), ref({B, rd.kv_len, Dkv()}),
                 ref({B, rd.kv_len, Dkv()}), ref({B, rd.q_len, D()}), ref({B, H, rd.q_len})};
    op.outputs = {ref({B, rd.q_len, D()}), ref({B, rd.kv_len, Dkv()}), ref({B, rd.kv_len, Dkv()}),
                  ref({B, H, sr}), ref({B, sr, H, (hd + 31) / 32 * 32})};
    if (H != Hkv)
      for (int i = 0; i < 2; ++i) op.outputs.push_back(ref({B, rd.kv_len, H, hd}));
    args().encode(op);
    return op;
  }
};

float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// ring_forward_kernel's walk, on the host, from the views' first elements.
void emulate_forward(const RingAttnLayout& l, const float* q, const float* k, const float* v, F& o,
                     F& lse) {
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t h = 0; h < l.H; ++h)
      for (int64_t i = 0; i < l.Sq; ++i) {
        const int64_t kvh = h / l.group, keys = l.causal ? std::min(i + 1, l.Skv) : l.Skv;
        const float* qr = q + ring_q_index(l, b, i, h);
        F acc(static_cast<size_t>(l.hd), 0.0f);
        float m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          const float sc = dot(qr, k + ring_kv_index(l, b, j, kvh), l.hd) * l.scale;
          const float mn = std::max(m, sc), c = m == -INFINITY ? 0 : std::exp(m - mn),
                      p = std::exp(sc - mn);
          sum = sum * c + p;
          for (int64_t e = 0; e < l.hd; ++e)
            acc[e] = acc[e] * c + p * v[ring_kv_index(l, b, j, kvh) + e];
          m = mn;
        }
        for (int64_t e = 0; e < l.hd; ++e) o[ring_out_index(l, b, i, h) + e] = acc[e] / sum;
        lse[ring_lse_index(l, b, h, i)] = m + std::log(sum);
      }
}

// ring_backward_dq_kernel's and ring_backward_dkv_kernel's walks, on the host.
void emulate_backward(const RingAttnLayout& l, const float* g, const float* q, const float* k,
                      const float* v, const float* o, const float* lse, F& dq, F& dk, F& dv,
                      F& sd) {
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t h = 0; h < l.H; ++h)
      for (int64_t i = 0; i < l.Sq; ++i) {
        const int64_t qb = ring_q_index(l, b, i, h), kvh = h / l.group;
        const float delta = dot(g + qb, o + qb, l.hd), li = lse[ring_lse_index(l, b, h, i)];
        sd[(b * l.H + h) * l.sd_ld + i] = delta;
        F acc(static_cast<size_t>(l.hd), 0.0f);
        for (int64_t j = 0; j < (l.causal ? std::min(i + 1, l.Skv) : l.Skv); ++j) {
          const int64_t kb = ring_kv_index(l, b, j, kvh);
          const float p = std::exp(dot(q + qb, k + kb, l.hd) * l.scale - li);
          const float ds = p * (dot(g + qb, v + kb, l.hd) - delta);
          for (int64_t e = 0; e < l.hd; ++e) acc[e] += ds * k[kb + e];
        }
        for (int64_t e = 0; e < l.hd; ++e) dq[ring_out_index(l, b, i, h) + e] = acc[e] * l.scale;
      }
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t kvh = 0; kvh < l.Hkv; ++kvh)
      for (int64_t j = 0; j < l.Skv; ++j) {
        const int64_t kb = ring_kv_index(l, b, j, kvh);
        F gk(static_cast<size_t>(l.hd), 0.0f), gv(static_cast<size_t>(l.hd), 0.0f);
        for (int64_t h = kvh * l.group; h < (kvh + 1) * l.group; ++h)
          for (int64_t i = l.causal ? j : 0; i < l.Sq; ++i) {
            const int64_t qb = ring_q_index(l, b, i, h);
            const float p =
                std::exp(dot(q + qb, k + kb, l.hd) * l.scale - lse[ring_lse_index(l, b, h, i)]);
            const float ds = p * (dot(g + qb, v + kb, l.hd) - sd[(b * l.H + h) * l.sd_ld + i]);
            for (int64_t e = 0; e < l.hd; ++e) {
              gk[e] += ds * q[qb + e];
              gv[e] += p * g[qb + e];
            }
          }
        for (int64_t e = 0; e < l.hd; ++e) {
          dk[ring_kv_out_index(l, b, j, kvh) + e] = gk[e] * l.scale;
          dv[ring_kv_out_index(l, b, j, kvh) + e] = gv[e];
        }
      }
}

// Every round after the first of every rank at cp 2 and 3 (both kinds: half the keys, and the
// second half of the queries), GQA and odd head dims: the plan's walk equals the CPU kernels.
TEST(CudaContextParallelPlan, RingRoundsWalkedByThePlanEqualTheCpuKernels) {
  std::mt19937 rng(31);
  struct Shape5 {
    int64_t B, L, H, Hkv, hd;
  };
  int rounds = 0;
  for (Shape5 s : {Shape5{1, 4, 1, 1, 8}, Shape5{2, 8, 4, 2, 16}, Shape5{3, 6, 2, 1, 40}})
    for (int cp : {2, 3})
      for (int r = 0; r < cp; ++r)
        for (int i = 1; i < cp; ++i) {
          const Round rd{s.B, s.L, s.H, s.Hkv, s.hd, cp_round(i, r, cp, s.L)};
          const OpCall fwd = rd.forward_op(), bwd = rd.backward_op();
          ASSERT_TRUE(plan::is_ring_attention(fwd) && plan::is_ring_attention(bwd));
          const RingAttnLayout l = plan::plan_ring_attention(fwd);
          EXPECT_EQ(l.Sq, rd.rd.q_len);
          EXPECT_EQ(l.Skv, rd.rd.kv_len);
          EXPECT_EQ(l.q_bs, s.L * s.H * s.hd);
          EXPECT_EQ(l.kv_bs, s.L * s.Hkv * s.hd);
          // The local sequences, and the round's views into them (row offsets of batch 0).
          const F q = random(static_cast<size_t>(s.B * s.L * rd.D()), rng, -2, 2);
          const F k = random(static_cast<size_t>(s.B * s.L * rd.Dkv()), rng, -2, 2);
          const F v = random(static_cast<size_t>(s.B * s.L * rd.Dkv()), rng);
          const float* qv = q.data() + rd.rd.q_begin * rd.D();
          const float* kv = k.data() + rd.rd.kv_begin * rd.Dkv();
          const float* vv = v.data() + rd.rd.kv_begin * rd.Dkv();
          const size_t on = static_cast<size_t>(s.B * rd.rd.q_len * rd.D()),
                       ln = static_cast<size_t>(s.B * s.H * rd.rd.q_len);
          F o_cpu(on), lse_cpu(ln), o(on), lse(ln);
          cpu::run_kernel(fwd,
                          {const_cast<float*>(qv), const_cast<float*>(kv), const_cast<float*>(vv)},
                          {o_cpu.data(), lse_cpu.data()});
          emulate_forward(l, qv, kv, vv, o, lse);
          const std::string what = "B " + std::to_string(s.B) + " cp " + std::to_string(cp) +
                                   " rank " + std::to_string(r) + " round " + std::to_string(i);
          expect_near(o, o_cpu, 1e-5f, what + " O");
          expect_near(lse, lse_cpu, 1e-5f, what + " lse");
          // Backward: dO and O strided like q (O written back into a local-length buffer).
          const F g = random(static_cast<size_t>(s.B * s.L * rd.D()), rng);
          F ofull(static_cast<size_t>(s.B * s.L * rd.D()), 0.0f);
          for (int64_t b = 0; b < s.B; ++b)
            std::copy_n(o_cpu.data() + b * rd.rd.q_len * rd.D(), rd.rd.q_len * rd.D(),
                        ofull.data() + (b * s.L + rd.rd.q_begin) * rd.D());
          const float* gv = g.data() + rd.rd.q_begin * rd.D();
          const float* ov = ofull.data() + rd.rd.q_begin * rd.D();
          const RingAttnLayout lb = plan::plan_ring_attention_backward(bwd);
          std::vector<F> cpu_out, emu_out;
          for (const TensorRef& t : bwd.outputs) cpu_out.emplace_back(t.meta.numel(), 0.0f);
          emu_out = cpu_out;
          std::vector<void*> outs;
          for (F& t : cpu_out) outs.push_back(t.data());
          cpu::run_kernel(bwd,
                          {const_cast<float*>(gv), const_cast<float*>(qv), const_cast<float*>(kv),
                           const_cast<float*>(vv), const_cast<float*>(ov), lse_cpu.data()},
                          outs);
          emulate_backward(lb, gv, qv, kv, vv, ov, lse_cpu.data(), emu_out[0], emu_out[1],
                           emu_out[2], emu_out[3]);
          for (int t = 0; t < 3; ++t)
            expect_near(emu_out[t], cpu_out[t], 2e-4f, what + " d" + "qkv"[t]);
          ++rounds;
        }
  EXPECT_EQ(rounds, 3 * (2 * 1 + 3 * 2));
}

TEST(CudaContextParallelPlan, RoundZeroRunsTheFlashKernelsAndBadRoundsAreRefused) {
  const Round r0{2, 8, 2, 2, 16, cp_round(0, 1, 2, 8)};
  EXPECT_FALSE(plan::is_ring_attention(r0.forward_op()));  // local causal: the flash kernels
  Round bad{2, 8, 2, 2, 16, cp_round(1, 1, 2, 8)};
  OpCall op = bad.forward_op();
  op.inputs[1].meta.shape = {2, 3, 32};  // k of the wrong length
  EXPECT_NE(refusal(op, &plan::plan_ring_attention).find("k has"), std::string::npos)
      << refusal(op, &plan::plan_ring_attention);
  op = bad.forward_op();
  op.outputs[1].meta.dtype = DType::kBFloat16;
  EXPECT_NE(refusal(op, &plan::plan_ring_attention).find("logsumexp fp32"), std::string::npos);
  op = bad.backward_op();
  op.outputs.pop_back();  // no dq_accum
  EXPECT_NE(refusal(op, &plan::plan_ring_attention_backward).find("round backward"),
            std::string::npos);
  op = bad.forward_op();
  op.kind = OpKind::kAttentionEfficient;  // the scenario refuses it under cp
  EXPECT_FALSE(plan::is_ring_attention(op));
}

// kSdpaMerge: the plan's block rows (the second half when partial), walked as sdpa_merge_kernel
// walks them, equal the CPU kernel; kSeqRowsAdd's plan decodes the rows and refuses integers.
TEST(CudaContextParallelPlan, MergeAndRowsAddPlansEqualTheCpuKernels) {
  std::mt19937 rng(7);
  for (bool partial : {false, true}) {
    const int64_t B = 2, L = 6, H = 3, hd = 5, Lq = partial ? 3 : 6, D = H * hd;
    OpCall op;
    op.kind = OpKind::kSdpaMerge;
    op.name = "merge";
    op.inputs = {ref({B, L, D}), ref({B, H, L}), ref({B, Lq, D}), ref({B, H, Lq})};
    op.outputs = {ref({B, L, D}), ref({B, H, L})};
    SdpaMergeArgs{partial}.encode(op);
    const SdpaMergePlan p = plan::plan_sdpa_merge(op);
    EXPECT_EQ(p.first_row, partial ? 3 : 0);
    F acc = random(B * L * D, rng), lse = random(B * H * L, rng, -3, 3);
    F blk = random(B * Lq * D, rng), blse = random(B * H * Lq, rng, -3, 3);
    F o_cpu(acc.size()), l_cpu(lse.size());
    cpu::run_kernel(op, {acc.data(), lse.data(), blk.data(), blse.data()},
                    {o_cpu.data(), l_cpu.data()});
    F o = acc, l = lse;
    for (int64_t idx = 0; idx < p.batch * p.block_len * D; ++idx) {
      const int64_t e = idx % hd, h = (idx / hd) % H, s = (idx / D) % p.block_len,
                    b = idx / (D * p.block_len), pos = p.first_row + s;
      const float old = lse[(b * H + h) * L + pos], bl = blse[(b * H + h) * Lq + s];
      const float w = 1.0f / (1.0f + std::exp(-(bl - old)));
      const int64_t oi = (b * L + pos) * D + h * hd + e;
      o[oi] = acc[oi] - w * (acc[oi] - blk[(b * Lq + s) * D + h * hd + e]);
      const float x = old - bl;
      if (e == 0)
        l[(b * H + h) * L + pos] = old - (std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))));
    }
    expect_near(o, o_cpu, 1e-6f, partial ? "partial merge out" : "merge out");
    expect_near(l, l_cpu, 1e-6f, partial ? "partial merge lse" : "merge lse");
  }
  OpCall add;
  add.kind = OpKind::kSeqRowsAdd;
  add.name = "rows add";
  add.inputs = {ref({2, 8, 4}), ref({2, 3, 4})};
  add.outputs = {ref({2, 8, 4})};
  SeqRowsArgs{2, 8, 5, 3, 4}.encode(add);
  const plan::SeqRowsPlan a = plan::plan_seq_rows_add(add);
  EXPECT_EQ(a.begin, 5);
  EXPECT_EQ(a.n, 3);
  add.inputs[1].meta.dtype = DType::kInt64;
  std::string message;
  try {
    plan::plan_seq_rows_add(add);
  } catch (const InternalError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rows add"), std::string::npos) << message;
}

}  // namespace
}  // namespace fullshard::cuda
