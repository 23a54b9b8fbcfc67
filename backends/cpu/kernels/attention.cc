// Causal scaled-dot-product attention with GQA, flash-attention style: forward returns O and
// the row logsumexp; backward recomputes P = exp(scale * q k^T - lse) from the saved lse.
// Per (batch, head) and block of query rows, QK^T, PV and the backward products are fp32
// OpenBLAS GEMMs over the causal prefix of keys; softmax is max-subtracted in fp32.
// Query head h reads kv head h / (H / Hkv) (repeat_kv / repeat_interleave grouping).
// The efficient and cuDNN kinds run the same maths; AttentionArgs::lse_len is the length of a
// logsumexp row (efficient attention pads it to a multiple of 32; the padding is not written).
// A ring-attention round (context parallelism, AttentionArgs::ring()) reads kv_seq keys, masks
// nothing when not causal, and reads q (and dO, O) and k / v as strided halves of longer local
// sequences (q_batch_rows / kv_batch_rows rows between batches); its outputs are contiguous.
// Multi-head latent attention's v (and so O, dO, dv) has its own head size vd (AttentionArgs::
// v_head_dim) and the op may carry its own softmax scale.
#include <cmath>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/cudnn_sdpa_workspace.h"

namespace fullshard::cpu::detail {

namespace {

constexpr int64_t kBlock = 128;  // query rows per block

struct AttnDims {
  int64_t B, S, H, Hkv, hd;
  bool packed;
  int64_t vd, v_ld;             // v's head size and row stride (hd and kv_ld but for MLA)
  int64_t q_ld, kv_ld;          // row strides (elements per token) of q and k/v storage
  int64_t q_off, k_off, v_off;  // column offsets of q / k / v inside their token rows
  float scale;
  int64_t lse_len;  // logsumexp row length (>= S)
  int64_t Skv;      // keys per batch (S unless a ring round)
  bool causal;
  int64_t qb, kb;  // rows between one batch's first row and the next's in q (dO, O) and k / v
  // Elements spanned by q (dO, O) and by k / v: the last batch's rows end the view.
  int64_t q_span() const { return B == 0 ? 0 : ((B - 1) * qb + S) * q_ld; }
  int64_t kv_span() const { return B == 0 ? 0 : ((B - 1) * kb + Skv) * kv_ld; }
  int64_t v_span() const { return B == 0 ? 0 : ((B - 1) * kb + Skv) * v_ld; }
  // Keys query row i sees: its causal prefix, or all of them.
  int64_t keys(int64_t i) const { return causal ? i + 1 : Skv; }
};

// AttentionArgs (core/runtime/attention_args.h) decodes and checks iargs and the layout.
AttnDims attn_dims(const OpCall& op) {
  const AttentionArgs a = AttentionArgs::decode(op);
  return {a.batch,   a.seq,    a.heads,  a.kv_heads,     a.head_dim,     a.packed, a.vd(),
          a.v_ld,    a.q_ld,   a.kv_ld,  a.q_off,        a.k_off,        a.v_off,  a.scale,
          a.lse_len, a.kv_seq, a.causal, a.q_batch_rows, a.kv_batch_rows};
}

void expect_numel(const OpCall& op, const TensorMeta& m, int64_t n, const char* what) {
  FULLSHARD_CHECK(m.numel() == n, where(op) + what + " has " + std::to_string(m.numel()) +
                                      " elements, expected " + std::to_string(n));
}

// fp32 views of q, k, v (one buffer when packed). Inputs start at `first`.
struct QKV {
  std::vector<F32In> bufs;
  const float *q, *k, *v;
};
QKV load_qkv(const OpCall& op, const Ptrs& in, size_t first, const AttnDims& d) {
  QKV r;
  const int64_t tokens = d.B * d.S;
  r.bufs.reserve(3);
  if (d.packed) {
    expect_numel(op, in_meta(op, first), tokens * d.q_ld, "qkv");
    r.bufs.emplace_back(in[first], in_meta(op, first).dtype, tokens * d.q_ld);
    r.q = r.bufs[0].data();
    r.k = r.q + d.k_off;
    r.v = r.q + d.v_off;
  } else {
    expect_numel(op, in_meta(op, first), tokens * d.q_ld, "q");
    expect_numel(op, in_meta(op, first + 1), d.B * d.Skv * d.kv_ld, "k");
    expect_numel(op, in_meta(op, first + 2), d.B * d.Skv * d.v_ld, "v");
    for (size_t i = 0; i < 3; ++i)
      r.bufs.emplace_back(in[first + i], in_meta(op, first + i).dtype,
                          i == 2 ? d.v_span()
                          : i    ? d.kv_span()
                                 : d.q_span());
    r.q = r.bufs[0].data();
    r.k = r.bufs[1].data();
    r.v = r.bufs[2].data();
  }
  return r;
}

}  // namespace

void attention(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const AttnDims d = attn_dims(op);
  // (q, k, v) | (qkv) -> (o [B, S, H, hd], lse [B, H, S] fp32); the efficient kind above head_dim
  // 128 also passes its fp32 output accumulator (core/model/attention_variants.cc), a GPU
  // kernel's scratch, ignored here.
  const bool accum = op.kind == OpKind::kAttentionEfficient && std::max(d.hd, d.vd) > 128;
  expect_arity(op, d.packed ? 1 : 3, accum ? 3 : 2);
  const int64_t D = d.H * d.vd, tokens = d.B * d.S;  // O's row
  expect_numel(op, out_meta(op, 0), tokens * D, "o");
  expect_numel(op, out_meta(op, 1), d.B * d.H * d.lse_len, "logsumexp");
  FULLSHARD_CHECK(out_meta(op, 1).dtype == DType::kFloat32, where(op) + "logsumexp must be fp32");
  QKV t = load_qkv(op, in, 0, d);
  F32Out o(out[0], out_meta(op, 0).dtype, tokens * D);
  float* lse = static_cast<float*>(out[1]);
  const int64_t group = d.H / d.Hkv;
  std::vector<float> p(static_cast<size_t>(std::min(kBlock, d.S) * std::max(d.S, d.Skv)));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t kvh = h / group;
      const float* q = t.q + b * d.qb * d.q_ld + d.q_off + h * d.hd;
      const float* k = t.k + b * d.kb * d.kv_ld + kvh * d.hd;
      const float* v = t.v + b * d.kb * d.v_ld + kvh * d.vd;
      float* ob = o.data() + b * d.S * D + h * d.vd;
      float* lb = lse + (b * d.H + h) * d.lse_len;
      for (int64_t i0 = 0; i0 < d.S; i0 += kBlock) {
        const int64_t m = std::min(d.S, i0 + kBlock) - i0;
        const int64_t i1 = d.causal ? i0 + m : d.Skv;  // keys [0, i1)
        gemm(false, true, m, i1, d.hd, d.scale, q + i0 * d.q_ld, d.q_ld, k, d.kv_ld, 0.0f, p.data(),
             i1);
        for (int64_t r = 0; r < m; ++r) {
          float* pr = p.data() + r * i1;
          const int64_t valid = d.keys(i0 + r);  // keys 0..i (causal)
          float mx = pr[0];
          for (int64_t j = 1; j < valid; ++j) mx = std::max(mx, pr[j]);
          double sum = 0;
          for (int64_t j = 0; j < valid; ++j) {
            pr[j] = std::exp(pr[j] - mx);
            sum += pr[j];
          }
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j < valid; ++j) pr[j] *= inv;
          for (int64_t j = valid; j < i1; ++j) pr[j] = 0.0f;
          lb[i0 + r] = mx + static_cast<float>(std::log(sum));
        }
        gemm(false, false, m, d.vd, i1, 1.0f, p.data(), i1, v, d.v_ld, 0.0f, ob + i0 * D, D);
      }
    }
  o.commit();
}

void attention_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const AttnDims d = attn_dims(op);
  // (dO, q, k, v, O, lse) | (dO, qkv, O, lse) -> (dq, dk, dv[, softmax_d, dq_accum[, dk_expanded,
  // dv_expanded]]): the flash temporaries the model passes as a GPU kernel's scratch are ignored
  // (efficient: delta and its dq workspace; cuDNN: the frontend's workspace, one tensor).
  // Dispatch checked the op table's output counts (check_addresses); the flash temporaries
  // come in pairs, so of its 5..7 only 6 is left to refuse.
  const size_t n_out = op.outputs.size();
  FULLSHARD_CHECK(op.kind == OpKind::kAttentionCudnnBackward || n_out != 6,
                  where(op) +
                      "expected 5 or 7 outputs (dq, dk, dv, then the backend's "
                      "temporaries in pairs), got 6");
  expect_arity(op, d.packed ? 4 : 6, n_out);
  // Dq / Dk: q's and k's rows; D / Dv: O's (dO's) and v's rows (v_head_dim wide for MLA).
  const int64_t Dq = d.H * d.hd, Dkv = d.Hkv * d.hd, D = d.H * d.vd, Dv = d.Hkv * d.vd;
  const int64_t tokens = d.B * d.S;
  const size_t io = d.packed ? 2 : 4;  // index of O; lse follows
  const int64_t kv_tokens = d.B * d.Skv;
  expect_numel(op, in_meta(op, 0), tokens * D, "dO");
  expect_numel(op, in_meta(op, io), tokens * D, "O");
  expect_numel(op, in_meta(op, io + 1), d.B * d.H * d.lse_len, "logsumexp");
  FULLSHARD_CHECK(in_meta(op, io + 1).dtype == DType::kFloat32,
                  where(op) + "logsumexp must be fp32");
  expect_numel(op, out_meta(op, 0), tokens * Dq, "dq");
  expect_numel(op, out_meta(op, 1), kv_tokens * Dkv, "dk");
  expect_numel(op, out_meta(op, 2), kv_tokens * Dv, "dv");
  if (op.kind == OpKind::kAttentionCudnnBackward)  // one block (NOTE [cuDNN SDPA workspace])
    expect_numel(op, out_meta(op, 3), cudnn_sdpa_workspace(true, d.B, d.S, d.H, d.hd).total() / 4,
                 "cuDNN workspace");
  QKV t = load_qkv(op, in, 1, d);
  const int64_t q_span = d.B == 0 ? 0 : ((d.B - 1) * d.qb + d.S) * D;  // dO and O as q
  F32In dout(in[0], in_meta(op, 0).dtype, q_span);
  const float* lse = static_cast<const float*>(in[io + 1]);
  // delta_i = sum_d dO_i * O_i (flash's softmax_d), per (b, h, i).
  std::vector<float> delta(static_cast<size_t>(d.B * d.H * d.S));
  {
    F32In o(in[io], in_meta(op, io).dtype, q_span);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t s = 0; s < d.S; ++s)
        for (int64_t h = 0; h < d.H; ++h) {
          const int64_t base = (b * d.qb + s) * D + h * d.vd;
          double acc = 0;
          for (int64_t e = 0; e < d.vd; ++e)
            acc += static_cast<double>(dout[base + e]) * o[base + e];
          delta[(b * d.H + h) * d.S + s] = static_cast<float>(acc);
        }
  }
  F32Out dq(out[0], out_meta(op, 0).dtype, tokens * Dq);
  F32Out dk(out[1], out_meta(op, 1).dtype, kv_tokens * Dkv);
  F32Out dv(out[2], out_meta(op, 2).dtype, kv_tokens * Dv);
  std::fill_n(dk.data(), kv_tokens * Dkv, 0.0f);  // accumulated over query blocks and GQA groups
  std::fill_n(dv.data(), kv_tokens * Dv, 0.0f);
  const int64_t group = d.H / d.Hkv;
  const size_t scratch = static_cast<size_t>(std::min(kBlock, d.S) * std::max(d.S, d.Skv));
  std::vector<float> p(scratch), ds(scratch);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t kvh = h / group;
      const float* q = t.q + b * d.qb * d.q_ld + d.q_off + h * d.hd;
      const float* k = t.k + b * d.kb * d.kv_ld + kvh * d.hd;
      const float* v = t.v + b * d.kb * d.v_ld + kvh * d.vd;
      const float* go = dout.data() + b * d.qb * D + h * d.vd;
      float* gq = dq.data() + b * d.S * Dq + h * d.hd;
      float* gk = dk.data() + b * d.Skv * Dkv + kvh * d.hd;
      float* gv = dv.data() + b * d.Skv * Dv + kvh * d.vd;
      const float* lb = lse + (b * d.H + h) * d.lse_len;
      const float* db = delta.data() + (b * d.H + h) * d.S;
      for (int64_t i0 = 0; i0 < d.S; i0 += kBlock) {
        const int64_t m = std::min(d.S, i0 + kBlock) - i0;
        const int64_t i1 = d.causal ? i0 + m : d.Skv;
        gemm(false, true, m, i1, d.hd, d.scale, q + i0 * d.q_ld, d.q_ld, k, d.kv_ld, 0.0f, p.data(),
             i1);
        gemm(false, true, m, i1, d.vd, 1.0f, go + i0 * D, D, v, d.v_ld, 0.0f, ds.data(),
             i1);  // dP
        for (int64_t r = 0; r < m; ++r) {
          float* pr = p.data() + r * i1;
          float* dr = ds.data() + r * i1;
          const int64_t valid = d.keys(i0 + r);
          const float l = lb[i0 + r], dl = db[i0 + r];
          for (int64_t j = 0; j < valid; ++j) {
            pr[j] = std::exp(pr[j] - l);
            dr[j] = pr[j] * (dr[j] - dl);
          }
          for (int64_t j = valid; j < i1; ++j) pr[j] = dr[j] = 0.0f;
        }
        // dQ = scale dS K; dK += scale dS^T Q; dV += P^T dO.
        gemm(false, false, m, d.hd, i1, d.scale, ds.data(), i1, k, d.kv_ld, 0.0f, gq + i0 * Dq, Dq);
        gemm(true, false, i1, d.hd, m, d.scale, ds.data(), i1, q + i0 * d.q_ld, d.q_ld, 1.0f, gk,
             Dkv);
        gemm(true, false, i1, d.vd, m, 1.0f, p.data(), i1, go + i0 * D, D, 1.0f, gv, Dv);
      }
    }
  dq.commit();
  dk.commit();
  dv.commit();
}

}  // namespace fullshard::cpu::detail
