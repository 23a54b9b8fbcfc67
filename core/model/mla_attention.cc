#include "core/model/mla_attention.h"

#include "core/model/attention_variants.h"
#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/tensor_parallel_args.h"

// NOTE [Multi-head latent attention]: torchtitan's deepseek_v3 `Attention.forward`
// (torchtitan/models/deepseek_v3/model.py at pytorch/torchtitan@b5bcd76), op by op over the
// dense ops: q = wq(x), or wq_b(q_norm(wq_a(x))) with q_lora_rank > 0; q_nope, q_pe =
// split(q, [nope, rope]) per head; kv, k_pe = split(wkv_a(x), [kv_lora_rank, rope]); q_pe, k_pe
// = rope(q_pe, k_pe) (k_pe is one head, shared by all); q = cat(q_nope, q_pe); kv =
// wkv_b(kv_norm(kv)); k_nope, v = split(kv, [nope, v_head_dim]) per head; k = cat(k_nope,
// k_pe.expand(H)); SDPA(q, k, v, scale) with q / k heads of nope + rope and v heads of
// v_head_dim; wo. The scale is (nope + rope)^-0.5, times (0.1 mscale ln(rope_factor) + 1)^2
// under YaRN (MlaConfig::softmax_scale). With v_head_dim != nope + rope SDPA runs the efficient
// kernel (flash takes one head size; it stands in for torchtitan's flex attention). The splits
// and the expand are copies, not views; each split's backward is one gradient of its source's
// size, as SplitWithSizesBackward's. What that changes against PyTorch: docs/models.md.

namespace fullshard {
namespace ops {
using namespace detail;  // NOLINT

namespace {

CopyArgs row_concat(int64_t rows) {  // torch.cat(dim=-1) of `rows` rows
  CopyArgs a;
  a.rows = rows;
  return a;
}

void narrow_copy(Backend& b, const Tensor& src, const Tensor& dst, int64_t n, int64_t iw,
                 int64_t io, int64_t ow, int64_t oo, const std::string& name) {
  NarrowCopyArgs args;
  args.n = n, args.in_width = iw, args.in_offset = io, args.out_width = ow, args.out_offset = oo;
  OpCall op = make_op(OpKind::kNarrowCopy, name, {src.ref()}, {dst.ref()}, 0, args);
  op.bytes = 2.0 * static_cast<double>(dst.nbytes()) * n / ow;  // reads and writes n of every ow
  b.launch(kCompute, op);
}

Tensor row_cat(Backend& b, const Tensor& a, const Tensor& bt, const TensorMeta& meta, int64_t rows,
               MemCategory cat, const std::string& name) {
  Tensor y = empty_tensor(b, meta, cat, kCompute, name);
  b.launch(kCompute,
           make_op(OpKind::kCopy, name, {a.ref(), bt.ref()}, {y.ref()}, 0, row_concat(rows)));
  return y;
}

}  // namespace

std::pair<Value, Value> split_last(ExecContext& c, Value x, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t w0, int64_t w1, const std::string& name) {
  Backend& b = c.backend();
  const int64_t w = w0 + w1, rows = batch * seq * heads;
  FULLSHARD_CHECK(x.t.numel() == rows * w, name + ": input is not [B, S, heads * (w0 + w1)]");
  const DType dt = x.t.dtype();
  const TensorMeta m0{dt, {batch, seq, heads * w0}}, m1{dt, {batch, seq, heads * w1}};
  Tensor y0 = c.empty(m0, MemCategory::kActivation, name + "[0]");
  narrow_copy(b, x.t, y0, w0, w, 0, w0, 0, name + "[0]");
  Tensor y1 = c.empty(m1, MemCategory::kActivation, name + "[1]");
  narrow_copy(b, x.t, y1, w1, w, w0, w1, 0, name + "[1]");
  const bool rg = x.requires_grad();
  Value o0 = result(c, y0, rg), o1 = result(c, y1, rg);
  if (c.recording() && rg) {
    const TensorMeta xm = x.t.meta();
    c.record(
        Node{name, {x.id}, {o0.id, o1.id}, [&b, xm, m0, m1, rows, name](std::vector<Tensor>& g) {
               Tensor g0 = g[0], g1 = g[1];
               for (auto [t, m] : {std::pair<Tensor*, const TensorMeta*>{&g0, &m0},
                                   std::pair<Tensor*, const TensorMeta*>{&g1, &m1}})
                 if (!*t) {  // the output got no gradient: zeros in its columns
                   *t = empty_tensor(b, *m, MemCategory::kTemporary, kCompute, name + " zeros");
                   fill_zero(b, kCompute, *t, name + " zeros");
                 }
               Tensor gx =
                   row_cat(b, g0, g1, xm, rows, MemCategory::kTemporary, name + " backward (cat)");
               return std::vector<Tensor>{gx};
             }});
  }
  return {o0, o1};
}

Value cat_last(ExecContext& c, Value a, Value bv, int64_t batch, int64_t seq, int64_t heads,
               int64_t wa, int64_t wb, const std::string& name) {
  Backend& b = c.backend();
  const int64_t rows = batch * seq * heads, w = wa + wb;
  FULLSHARD_CHECK(a.t.numel() == rows * wa && bv.t.numel() == rows * wb,
                  name + ": inputs are not [B, S, heads * wa] and [B, S, heads * wb]");
  const TensorMeta ym{a.t.dtype(), {batch, seq, heads * w}};
  Tensor y = c.empty(ym, MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kCopy, name, {a.t.ref(), bv.t.ref()}, {y.ref()}, 0, row_concat(rows)));
  const bool rg = a.requires_grad() || bv.requires_grad();
  Value out = result(c, y, rg);
  if (c.recording() && rg) {
    const bool need_a = a.requires_grad(), need_b = bv.requires_grad();
    const TensorMeta am = a.t.meta(), bm = bv.t.meta();
    c.record(Node{
        name,
        {a.id, bv.id},
        {out.id},
        [&b, am, bm, wa, wb, w, need_a, need_b, name](std::vector<Tensor>& g) {
          Tensor ga, gb;
          if (need_a) {
            ga = empty_tensor(b, am, MemCategory::kTemporary, kCompute, name + " backward[0]");
            narrow_copy(b, g[0], ga, wa, w, 0, wa, 0, name + " backward[0]");
          }
          if (need_b) {
            gb = empty_tensor(b, bm, MemCategory::kTemporary, kCompute, name + " backward[1]");
            narrow_copy(b, g[0], gb, wb, w, wa, wb, 0, name + " backward[1]");
          }
          return std::vector<Tensor>{ga, gb};
        }});
  }
  return out;
}

}  // namespace ops

void add_mla_attention(Module& a, const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t D = c.dim, H = c.n_heads;
  if (m.q_lora_rank == 0) {
    a.add_child("wq", "Linear")->add_param("weight", {H * m.qk_head_dim(), D});
  } else {
    a.add_child("wq_a", "Linear")->add_param("weight", {m.q_lora_rank, D});
    a.add_child("q_norm", "RMSNorm")->add_param("weight", {m.q_lora_rank});
    a.add_child("wq_b", "Linear")->add_param("weight", {H * m.qk_head_dim(), m.q_lora_rank});
  }
  a.add_child("wkv_a", "Linear")->add_param("weight", {m.kv_lora_rank + m.qk_rope_head_dim, D});
  a.add_child("kv_norm", "RMSNorm")->add_param("weight", {m.kv_lora_rank});
  a.add_child("wkv_b", "Linear")
      ->add_param("weight", {H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank});
  a.add_child("wo", "Linear")->add_param("weight", {D, H * m.v_head_dim});
}

Value mla_attention(ExecContext& c, Module& m, Value x, int64_t batch, int64_t seq,
                    const ModelConfig& cfg, const RopeParams& freqs) {
  const MlaConfig& a = cfg.mla;
  const ModelImplementation& impl = cfg.implementation;
  const int64_t H = cfg.n_heads, nope = a.qk_nope_head_dim, rope = a.qk_rope_head_dim;
  const int64_t qk = a.qk_head_dim(), vd = a.v_head_dim;
  const std::string& n = m.fqn;
  auto linear = [&](Value v, const char* lin) {
    return ops::linear(c, std::move(v), m.child(lin).param("weight"), nullptr, n + "." + lin);
  };
  auto norm = [&](Value v, const char* mod) {
    const Param& w = m.child(mod).param("weight");
    return impl.rms_norm == NormImpl::kEager
               ? ops::rms_norm_eager(c, std::move(v), w, cfg.norm_eps, n + "." + mod)
               : ops::rms_norm(c, std::move(v), w, cfg.norm_eps, n + "." + mod);
  };
  const Value held = x;  // forward's argument, alive until it returns (as llama_attention's)
  Value q;
  if (a.q_lora_rank == 0) {
    q = linear(x, "wq");
  } else {
    Value qa = linear(x, "wq_a");
    q = linear(norm(std::move(qa), "q_norm"), "wq_b");
  }
  auto [q_nope, q_pe] = ops::split_last(c, std::move(q), batch, seq, H, nope, rope, n + ".split_q");
  Value kv_a = linear(std::move(x), "wkv_a");
  auto [kv, k_pe] =
      ops::split_last(c, std::move(kv_a), batch, seq, 1, a.kv_lora_rank, rope, n + ".split_kv");
  if (impl.rope == RopeImpl::kComplex) {
    auto qk_r = ops::rope_complex(c, std::move(q_pe), std::move(k_pe), rope, freqs, n + ".rope_q",
                                  n + ".rope_k");
    q_pe = std::move(qk_r.first);
    k_pe = std::move(qk_r.second);
  } else {
    FULLSHARD_CHECK(impl.rope == RopeImpl::kFused && !impl.compile,
                    n + ": MLA runs rope fused or complex (check_moe)");
    q_pe = ops::rope(c, std::move(q_pe), rope, freqs, n + ".rope_q");
    k_pe = ops::rope(c, std::move(k_pe), rope, freqs, n + ".rope_k");
  }
  Value qc =
      ops::cat_last(c, std::move(q_nope), std::move(q_pe), batch, seq, H, nope, rope, n + ".cat_q");
  Value kv_b = linear(norm(std::move(kv), "kv_norm"), "wkv_b");
  auto [k_nope, v] =
      ops::split_last(c, std::move(kv_b), batch, seq, H, nope, vd, n + ".split_kv_b");
  // k_pe.expand(-1, H, -1): materialised as repeat_kv's copy (its backward sums the heads).
  Value k_pe_h = ops::repeat_kv(c, std::move(k_pe), 1, H, rope, n + ".expand_k_pe");
  Value k = ops::cat_last(c, std::move(k_nope), std::move(k_pe_h), batch, seq, H, nope, rope,
                          n + ".cat_k");
  ops::AttentionShape s{batch, seq, H, H, qk};
  s.v_head_dim = vd;
  s.scale = a.softmax_scale();
  Value o = vd != qk ? ops::attention_sdpa(c, std::move(qc), std::move(k), std::move(v), s,
                                           AttentionImpl::kEfficient, n + ".sdpa")
            : impl.attention == AttentionImpl::kFlash
                ? ops::attention(c, std::move(qc), std::move(k), std::move(v), s, n + ".sdpa")
                : ops::attention_sdpa(c, std::move(qc), std::move(k), std::move(v), s,
                                      impl.attention, n + ".sdpa");
  Value ot = ops::transpose_heads(c, std::move(o), s, n + ".transpose");
  return linear(std::move(ot), "wo");
}

}  // namespace fullshard
