#include "core/model/attention_variants.h"

#include "core/model/op_util.h"
#include "core/runtime/cudnn_sdpa_workspace.h"

// NOTE [SDPA backends]: what each CUDA backend of scaled_dot_product_attention saves for backward
// and allocates in it, read from PyTorch's sources (aten/src/ATen/native/transformers/cuda/
// attention.cu, attention_backward.cu, mem_eff_attention/kernel_forward.h / kernel_backward.h,
// sdp_utils.cpp; aten/src/ATen/native/cudnn/MHA.cpp). Flash is ops::attention (ops.cc).
// - efficient (_efficient_attention_forward / _backward): saves O [B, S, H, hd] and logsumexp
//   [B, H, ceil(S / 32) * 32] fp32 (kAlignLSE = 32, "block size of backward"); for head dims
//   above 128 the forward kernel keeps no output in registers (kKeepOutputInRF = kMaxK <=
//   kKeysPerBlock) and allocates an fp32 output accumulator like O (a temporary). Backward
//   allocates grad_q / grad_k / grad_v like q, k, v, delta [B, H, S] fp32 (kKernelComputesDelta
//   on sm80 bf16), and a workspace: dq is accumulated in fp32 (kNeedsAccumGradQ: bf16 output,
//   fp32 accumulator), one kBlockSizeI x kN tile per query block and head-dim block; with the
//   sm80 bf16 head-dim-128 kernel (128x128_k128) that is [B, H, round_up(S, 128),
//   round_up(hd, 128)] fp32, the size modelled here for every head dim (an approximation: other
//   kernels pick other tiles). Its dense constraints admit no GQA
//   (check_batch_size_and_num_heads_dense<false>), so k / v must carry H heads.
// - cuDNN (_scaled_dot_product_cudnn_attention / _cudnn_attention_backward): saves O and the
//   softmax stats [B, H, S, 1] fp32 (flash's logsumexp bytes), handles GQA natively, and its
//   backward allocates only dq, dk, dv (empty_like q, k, v: no expanded dk / dv as flash's).
//   Both directions take a workspace of mha_graph->get_workspace_size() bytes from the caching
//   allocator in one block (MHA.cpp: CUDACachingAllocator::get()->allocate(workspace_size); a
//   size of 0 allocates nothing): the frontend's tensors and the plan's own, sized by
//   cudnn_sdpa_workspace (NOTE [cuDNN SDPA workspace], core/runtime/cudnn_sdpa_workspace.cc).

namespace fullshard::ops {
using namespace detail;  // NOLINT

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

double causal_flops(const AttentionShape& s) {  // as ops::attention: half of the S x S scores
  return 2.0 * s.batch * s.heads * static_cast<double>(s.seq) * s.seq * s.head_dim;
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
  const std::vector<int64_t> args = {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, 0, lse_len};
  const DType dt = q.t.dtype();
  std::vector<Tensor> outs;
  const bool saves = sac_saves(c, false);
  if (auto* cached = sac_cached(c, saves)) {
    outs = *cached;
  } else {
    Tensor o = c.empty({dt, {s.batch, s.seq, s.heads, s.head_dim}}, MemCategory::kActivation, name);
    Tensor lse = c.empty({DType::kFloat32, {s.batch, s.heads, lse_len}}, MemCategory::kActivation,
                         name + " logsumexp");
    OpCall op = make_op(forward_kind(backend), name, {q.t.ref(), k.t.ref(), v.t.ref()},
                        {o.ref(), lse.ref()}, causal_flops(s), args);
    Tensor accum;
    if (backend == AttentionImpl::kEfficient && s.head_dim > 128) {
      accum = Tensor::empty(b, {DType::kFloat32, o.shape()}, MemCategory::kTemporary, kCompute,
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
                              {dq.ref(), dk.ref(), dv.ref()}, 2.5 * causal_flops(s), args);
          Tensor delta, workspace;
          if (backend == AttentionImpl::kEfficient) {
            delta = Tensor::empty(b, {DType::kFloat32, {s.batch, s.heads, s.seq}},
                                  MemCategory::kTemporary, kCompute, name + " delta");
            workspace =
                Tensor::empty(b,
                              {DType::kFloat32,
                               {s.batch, s.heads, round_up(s.seq, 128), round_up(s.head_dim, 128)}},
                              MemCategory::kTemporary, kCompute, name + " workspace");
            op.outputs.push_back(delta.ref());
            op.outputs.push_back(workspace.ref());
          } else {  // NOTE [cuDNN SDPA workspace]: the frontend's tensors and the plan's, one block
            const int64_t bytes =
                cudnn_sdpa_workspace(true, s.batch, s.seq, s.heads, s.head_dim).total();
            workspace = Tensor::empty(b, {DType::kFloat32, {bytes / 4}}, MemCategory::kTemporary,
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
