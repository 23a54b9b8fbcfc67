#include "core/model/attention_variants.h"

#include <algorithm>

#include "core/model/op_util.h"
#include "core/runtime/cudnn_sdpa_workspace.h"
#include "core/runtime/attention_args.h"

// NOTE [SDPA backends]: what each CUDA backend of scaled_dot_product_attention saves for backward
// and allocates in it, read from PyTorch's sources (the files, kernels and constants: docs/ops.md,
// "SDPA backends in full"). Flash is ops::attention (ops.cc).
// - efficient: saves O and logsumexp [B, H, round_up(S, 32)] fp32; above head dim 128 (q's or v's,
//   whichever is larger) the forward allocates an fp32 output accumulator like O. Backward
//   allocates dq, dk, dv, delta [B, H, S] fp32 and an fp32 dq accumulator modelled as
//   [B, H, round_up(S, 128), round_up(hd, 128)] (the sm80 bf16 hd-128 kernel's tiles; other
//   kernels tile differently). No GQA: k / v carry H heads.
// - cuDNN: saves O and the softmax stats [B, H, S, 1] fp32, takes GQA natively, and its backward
//   allocates only dq, dk, dv. Both directions take one workspace block of get_workspace_size()
//   bytes from the caching allocator (none when 0), sized by cudnn_sdpa_workspace (NOTE [cuDNN SDPA
//   workspace], core/runtime/cudnn_sdpa_workspace.cc).

namespace fullshard::ops {
using namespace detail;  // NOLINT

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// As ops::attention: half of the S x S scores, QK^T over q's head size and PV over v's.
double causal_flops(const AttentionShape& s) {
  return static_cast<double>(s.batch) * s.heads * static_cast<double>(s.seq) * s.seq *
         static_cast<double>(s.head_dim + s.vd());
}

// The backward's matmuls over the causal half: QK^T again, dQ and dK over q's head size, dP and
// dV over v's (torch/utils/flop_counter.py sdpa_backward_flop_count): (3 hd + 2 vd) / (hd + vd)
// times the forward's, exactly 2.5 when the head sizes are equal.
double backward_ratio(const AttentionShape& s) {
  return static_cast<double>(3 * s.head_dim + 2 * s.vd()) /
         static_cast<double>(s.head_dim + s.vd());
}

OpKind forward_kind(AttentionImpl a) {
  return a == AttentionImpl::kEfficient ? OpKind::kAttentionEfficient : OpKind::kAttentionCudnn;
}
OpKind backward_kind(AttentionImpl a) {
  return a == AttentionImpl::kEfficient ? OpKind::kAttentionEfficientBackward
                                        : OpKind::kAttentionCudnnBackward;
}

}  // namespace

int64_t attention_lse_len(AttentionImpl backend, int64_t seq) {
  return backend == AttentionImpl::kEfficient ? round_up(seq, 32) : seq;
}

Value attention_sdpa(ExecContext& c, Value q, Value k, Value v, const AttentionShape& s,
                     AttentionImpl backend, const std::string& name) {
  FULLSHARD_CHECK(backend != AttentionImpl::kFlash, name + ": flash attention is ops::attention");
  FULLSHARD_CHECK(backend != AttentionImpl::kEfficient || s.kv_heads == s.heads,
                  name + ": efficient attention needs k / v with the query's head count");
  Backend& b = c.backend();
  const int64_t lse_len = attention_lse_len(backend, s.seq);
  AttentionArgs args;
  args.batch = s.batch, args.seq = s.seq, args.heads = s.heads, args.kv_heads = s.kv_heads;
  args.head_dim = s.head_dim, args.lse_len = lse_len;
  args.v_head_dim = s.vd() != s.head_dim ? s.vd() : 0;
  args.softmax_scale = s.scale;
  FULLSHARD_CHECK(backend == AttentionImpl::kEfficient || s.vd() == s.head_dim,
                  name + ": cuDNN attention here takes one head size for q, k and v");
  const DType dt = q.t.dtype();
  std::vector<Tensor> outs;
  const bool saves = sac_saves(c, false);
  if (auto* cached = sac_cached(c, saves)) {
    outs = *cached;
  } else {
    Tensor o = c.empty({dt, {s.batch, s.seq, s.heads, s.vd()}}, MemCategory::kActivation, name);
    Tensor lse = c.empty({DType::kFloat32, {s.batch, s.heads, lse_len}}, MemCategory::kActivation,
                         name + " logsumexp");
    OpCall op = make_op(forward_kind(backend), name, {q.t.ref(), k.t.ref(), v.t.ref()},
                        {o.ref(), lse.ref()}, causal_flops(s), args);
    Tensor accum;
    if (backend == AttentionImpl::kEfficient && std::max(s.head_dim, s.vd()) > 128) {
      accum = empty_tensor(b, {DType::kFloat32, o.shape()}, MemCategory::kTemporary, kCompute,
                            name + " output_accum");
      op.outputs.push_back(accum.ref());  // scratch: op.bytes keeps counting O and lse alone
    }
    c.launch(op);
    outs = {o, lse};
    sac_store(c, saves, outs);
  }
  const bool rg = q.requires_grad() || k.requires_grad() || v.requires_grad();
  Value out = result(c, outs[0], rg);
  if (c.recording() && rg) {
    Tensor qs = q.t, ks = k.t, vs = v.t, o = outs[0], lse = outs[1];
    c.record(Node{
        name,
        {q.id, k.id, v.id},
        {out.id},
        [&b, qs, ks, vs, o, lse, s, backend, args, name](std::vector<Tensor>& g) {
          Tensor dq = grad_like(b, qs, name + " grad_q");
          Tensor dk = grad_like(b, ks, name + " grad_k");
          Tensor dv = grad_like(b, vs, name + " grad_v");
          OpCall op = make_op(backward_kind(backend), name + " backward",
                              {g[0].ref(), qs.ref(), ks.ref(), vs.ref(), o.ref(), lse.ref()},
                              {dq.ref(), dk.ref(), dv.ref()}, backward_ratio(s) * causal_flops(s),
                              args);
          Tensor delta, workspace;
          if (backend == AttentionImpl::kEfficient) {
            delta = empty_tensor(b, {DType::kFloat32, {s.batch, s.heads, s.seq}},
                                  MemCategory::kTemporary, kCompute, name + " delta");
            workspace =
                empty_tensor(b,
                              {DType::kFloat32,
                               {s.batch, s.heads, round_up(s.seq, 128), round_up(s.head_dim, 128)}},
                              MemCategory::kTemporary, kCompute, name + " workspace");
            op.outputs.push_back(delta.ref());
            op.outputs.push_back(workspace.ref());
          } else {  // NOTE [cuDNN SDPA workspace]: the frontend's tensors and the plan's, one block
            const int64_t bytes =
                cudnn_sdpa_workspace(true, s.batch, s.seq, s.heads, s.head_dim).total();
            workspace = empty_tensor(b, {DType::kFloat32, {bytes / 4}}, MemCategory::kTemporary,
                                      kCompute, name + " workspace");
            op.outputs.push_back(workspace.ref());
          }
          b.launch(kCompute, op);
          return std::vector<Tensor>{dq, dk, dv};
        }});
  }
  return out;
}

}  // namespace fullshard::ops
