#include "core/model/tensor_parallel.h"

#include "core/common/error.h"
#include "core/model/op_util.h"
#include "core/model/ops.h"

namespace fullshard {

// NOTE [Tensor-parallel plan]: torchtitan's apply_tp (torchtitan/models/llama3/infra/
// parallelize.py) calls parallelize_module with, for the root,
//   tok_embeddings: RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
//   norm:           SequenceParallel()
//   output:         ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1) if loss
//                   parallel else Replicate(), use_local_output=not loss_parallel)
// and for every block
//   attention_norm, ffn_norm: SequenceParallel()
//   attention, feed_forward:  PrepareModuleInput(Shard(1) -> Replicate())
//   wq, wk, wv, w1, w3:       ColwiseParallel()            (weight Shard(0))
//   wo, w2:                   RowwiseParallel(output_layouts=Shard(1))  (weight Shard(1))
// So the residual stream between the sublayers is sequence-sharded [B, S/tp, D]; each
// attention / MLP all-gathers the sequence first and reduce-scatters its output; heads and
// the FFN's hidden units are split tp ways; norm weights are replicated (their gradients come
// out Partial and are all-reduced over tp in FSDP's post-backward, FSDPParam.
// _get_grad_inner_tensor). A RowwiseParallel nn.Embedding shards the vocabulary (weight
// Shard(0)): ids outside this rank's rows give zero rows (DTensor's _MaskPartial), and the
// partial sum is reduce-scattered along the sequence.

void check_tensor_parallel(const ModelConfig& c, int64_t seq_len, int degree, bool loss_parallel) {
  if (degree <= 1) return;
  const std::string T = std::to_string(degree);
  const std::string fix_tp = " or use a tp size that divides it";
  if (c.arch != ModelArch::kLlama)
    throw InputError("fsdp.mesh.shape", "has tp " + T + " with a GPT-2 model",
                     "tensor parallelism is implemented for Llama models (model.arch \"llama\"); use tp 1 for GPT-2");
  auto need = [&](const char* field, int64_t v, const std::string& why) {
    if (v % degree != 0)
      throw InputError(field, "is " + std::to_string(v) + ", not divisible by the tp size " + T + " (" + why + ")",
                       "choose a value divisible by " + T + fix_tp);
  };
  need("model.n_heads", c.n_heads, "ColwiseParallel wq splits the heads");
  need("model.n_kv_heads", c.n_kv_heads, "ColwiseParallel wk / wv split the kv heads");
  need("model.ffn_dim", c.ffn_dim, "ColwiseParallel w1 / w3 split the hidden units");
  need("model.vocab_size", c.vocab_size, "the embedding and output shard the vocabulary");
  need("training.seq_len", seq_len, "sequence parallelism shards the sequence");
  const LossImpl loss = c.implementation.loss;
  if (loss == LossImpl::kFp32Output)
    throw InputError("model.implementation.loss", "is fp32_output with tp " + T + ", which fullshard does not model",
                     "use fp32_logits (the loss's .float() of the gathered or vocab-parallel logits)");
  if (loss_parallel && loss != LossImpl::kFp32Logits)
    throw InputError("model.implementation.loss",
                     "is " + std::string(loss_impl_name(loss)) + " with tp " + T + " and loss parallel",
                     "loss parallel computes in fp32 (logits.float()): use fp32_logits, or set "
                     "tensor_parallel.loss_parallel false");
}

void apply_tensor_parallel(Module& root, const TensorParallel& tp) {
  if (!tp.enabled()) return;
  auto ends = [](const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  root.for_each_param([&](Param& p) {
    p.tp_degree = tp.degree;
    p.tp_index = tp.index;
    const std::string& f = p.fqn;
    TpPlacement pl = TpPlacement::kReplicate;
    for (const char* col : {".wq.", ".wk.", ".wv.", ".w1.", ".w3."})
      if (f.find(col) != std::string::npos) pl = TpPlacement::kShard0;
    if (ends(f, ".wo.weight") || ends(f, ".w2.weight")) pl = TpPlacement::kShard1;
    if (f == "tok_embeddings.weight" || f == "output.weight") pl = TpPlacement::kShard0;
    p.tp_placement = pl;
    const int64_t dim = pl == TpPlacement::kShard0 ? 0 : 1;
    if (pl != TpPlacement::kReplicate) {
      FULLSHARD_CHECK(p.shape.at(dim) % tp.degree == 0, f + ": dim " + std::to_string(dim) + " of size " +
                                                            std::to_string(p.shape.at(dim)) +
                                                            " does not split over tp " + std::to_string(tp.degree));
      p.shape[dim] /= tp.degree;
    }
  });
}

namespace ops::tp {
using detail::kCompute;
using detail::make_op;
using detail::result;

namespace {

// out[j][i][:] = in[i][j][:] for in viewed as [a][b][inner] (torch.cat(torch.chunk(..)) when
// the chunked dim is the leading one of each block).
void transpose_blocks(Backend& b, const Tensor& in, const Tensor& out, int64_t a, int64_t bb, int64_t inner,
                      const std::string& name) {
  FULLSHARD_CHECK(in.numel() == a * bb * inner && out.numel() == in.numel(), name + ": bad block shape");
  b.launch(kCompute, make_op(OpKind::kTransposeBlocks, name, {in.ref()}, {out.ref()}, 0, {a, bb, inner}));
}

void collective(Backend& b, CollectiveKind kind, const Tensor& in, const Tensor& out, const ProcessGroup& g,
                const std::string& name) {
  CollectiveCall call;
  call.kind = kind;
  call.op = ReduceOp::kSum;
  call.name = name;
  call.input = in.ref();
  call.output = out.ref();
  b.collective(kCompute, call, g);
}

// [B, S/tp, D] -> [B, S, D] (the raw all-gather buffer is freed on return).
Tensor gather_seq(Backend& b, const Tensor& x, const TensorParallel& tp, MemCategory cat, const std::string& name) {
  const Shape& s = x.shape();
  FULLSHARD_CHECK(s.size() == 3, name + ": expects [B, S/tp, D]");
  const int64_t B = s[0], Sl = s[1], D = s[2], T = tp.degree;
  Tensor raw = Tensor::empty(b, {x.dtype(), {T * B, Sl, D}}, MemCategory::kTemporary, kCompute, name + " buffer");
  collective(b, CollectiveKind::kAllGather, x, raw, tp.group, name);
  Tensor out = Tensor::empty(b, {x.dtype(), {B, Sl * T, D}}, cat, kCompute, name);
  transpose_blocks(b, raw, out, T, B, Sl * D, name + " cat");
  return out;
}

// [B, S, D] -> [B, S/tp, D], summing over the group.
Tensor scatter_seq(Backend& b, const Tensor& x, const TensorParallel& tp, MemCategory cat, const std::string& name) {
  const Shape& s = x.shape();
  FULLSHARD_CHECK(s.size() == 3 && s[1] % tp.degree == 0, name + ": expects [B, S, D] with S divisible by tp");
  const int64_t B = s[0], T = tp.degree, Sl = s[1] / T, D = s[2];
  Tensor staged = Tensor::empty(b, {x.dtype(), {T * B, Sl, D}}, MemCategory::kTemporary, kCompute, name + " cat");
  transpose_blocks(b, x, staged, B, T, Sl * D, name + " cat");
  Tensor out = Tensor::empty(b, {x.dtype(), {B, Sl, D}}, cat, kCompute, name);
  collective(b, CollectiveKind::kReduceScatter, staged, out, tp.group, name);
  return out;
}

}  // namespace

Value all_gather_sequence(ExecContext& c, Value x, const TensorParallel& tp, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = gather_seq(b, x.t, tp, MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, tp, name](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{scatter_seq(b, g[0], tp, MemCategory::kTemporary, name + " backward")};
                  }});
  }
  return out;
}

Value reduce_scatter_sequence(ExecContext& c, Value x, const TensorParallel& tp, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = scatter_seq(b, x.t, tp, MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, tp, name](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{gather_seq(b, g[0], tp, MemCategory::kTemporary, name + " backward")};
                  }});
  }
  return out;
}

Value all_gather_last_dim(ExecContext& c, Value x, const TensorParallel& tp, const std::string& name) {
  Backend& b = c.backend();
  const Shape& s = x.t.shape();
  FULLSHARD_CHECK(s.size() == 3, name + ": expects [B, S, V/tp]");
  const int64_t rows = s[0] * s[1], Vl = s[2], T = tp.degree;
  Tensor raw = Tensor::empty(b, {x.t.dtype(), {T, rows, Vl}}, MemCategory::kTemporary, kCompute, name + " buffer");
  collective(b, CollectiveKind::kAllGather, x.t, raw, tp.group, name);
  Tensor y = Tensor::empty(b, {x.t.dtype(), {s[0], s[1], Vl * T}}, MemCategory::kActivation, kCompute, name);
  transpose_blocks(b, raw, y, T, rows, Vl, name + " cat");
  raw = Tensor();
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    const int64_t idx = tp.index;
    c.record(Node{name, {x.id}, {out.id}, [&b, Vl, T, idx, s, name](std::vector<Tensor>& g) {
                    Tensor gl = Tensor::empty(b, {g[0].dtype(), s}, MemCategory::kTemporary, kCompute,
                                              name + " backward");
                    OpCall op = make_op(OpKind::kNarrowCopy, name + " backward", {g[0].ref()}, {gl.ref()}, 0,
                                        {Vl, Vl * T, idx * Vl, Vl, 0});
                    op.fargs = {1.0};
                    b.launch(kCompute, op);
                    return std::vector<Tensor>{gl};
                  }});
  }
  return out;
}

Tensor all_reduce_clone(Backend& b, const Tensor& t, ReduceOp op, const ProcessGroup& group, MemCategory category,
                        const std::string& name) {
  Tensor out = Tensor::empty(b, t.meta(), category, kCompute, name);
  ops::copy_into(b, kCompute, out, t, name + " clone");
  CollectiveCall call;
  call.kind = CollectiveKind::kAllReduce;
  call.op = op;
  call.name = name;
  call.input = out.ref();
  call.output = out.ref();
  b.collective(kCompute, call, group);
  return out;
}

Tensor all_reduce_grad(Backend& b, const Tensor& grad, const ProcessGroup& group, const std::string& name) {
  return all_reduce_clone(b, grad, ReduceOp::kSum, group, MemCategory::kUnshardedGrad, name);
}

}  // namespace ops::tp
}  // namespace fullshard
