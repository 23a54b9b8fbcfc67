#include "core/model/tensor_parallel.h"

#include "core/common/error.h"
#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/tensor_parallel_args.h"
#include "core/runtime/eager_args.h"

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
// So the residual stream between sublayers is sequence-sharded [B, S/tp, D]: each attention / MLP
// all-gathers the sequence first and reduce-scatters its output. Norm weights are replicated,
// their Partial gradients all-reduced over tp in FSDP's post-backward; the rowwise embedding
// shards the vocabulary (zero rows for other ranks' ids). Each entry with fullshard's side:
// docs/fsdp2-correspondence.md, "Tensor parallelism".

// NOTE [GPT-2 tensor-parallel plan]: GPT-2 has no torchtitan recipe; the plan a PyTorch user
// writes with parallelize_module for it is the Megatron one, in torchtitan's shape:
//   wte:          RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
//   wpe:          replicated; each rank adds the rows of its own sequence slice to the
//                 sequence-sharded token embedding (its gradient comes out Partial)
//   ln_1, ln_2, ln_f: SequenceParallel()
//   attn, mlp:    PrepareModuleInput(Shard(1) -> Replicate())
//   attn.c_attn:  ColwiseParallel() over each of q, k, v (NOTE [Fused qkv under tensor
//                 parallelism]), bias sharded the same way
//   mlp.c_fc:     ColwiseParallel() (weight and bias Shard(0)); GELU is local
//   attn.c_proj, mlp.c_proj: RowwiseParallel(output_layouts=Shard(1)), the bias replicated
//                 (bias / tp in each partial sum; its gradient is already Replicate)
//   lm_head:      tied to wte: a [V, D] weight's colwise placement is Shard(0), the rowwise
//                 embedding's, so one Shard(0) wte serves both, as Llama's tied output.
// Norm weights and biases and wpe are replicated; their Partial gradients are all-reduced over
// tp in FSDP's post-backward (docs/fsdp2-correspondence.md, "Tensor parallelism", has the rest).
//
// NOTE [Fused qkv under tensor parallelism]: c_attn is one [3D, D] weight (q, k, v stacked;
// HF's Conv1D stores its transpose, core/checkpoint/hf_names.cc). A contiguous Shard(0) would
// give rank 0 all of q and part of k. Each rank needs its heads of q, k and v, so each of the
// three [D, D] blocks is sharded over tp on its own and the local [3D/tp, D] tensor stacks
// this rank's rows of q, k, v (Param::tp_blocks = 3): attention_packed then reads its
// D/tp-wide q, k, v slices as for n_heads / tp heads. The global tensor keeps HF's order, so
// an unsharded export needs no permutation. Such a piece is not one box of the global
// tensor (three, or more once FSDP cuts the local rows): checkpoints store it as one chunk per
// run of global rows (NOTE [Multi-box pieces of fused weights] in core/checkpoint/
// piece_layout.h); loading Hugging Face weights (--init-from, model.weights) reads the tensor whole
// and picks the rows (runner/init_weights.cc).

void check_tensor_parallel(const ModelConfig& c, int64_t seq_len, int degree, bool loss_parallel) {
  if (degree <= 1) return;
  const std::string T = std::to_string(degree);
  const std::string fix_tp = " or use a tp size that divides it";
  const bool llama = c.arch == ModelArch::kLlama;
  if (c.moe.enabled())  // the planner's tp candidates ask here too (docs/moe.md)
    throw InputError("fsdp.mesh",
                     "has tp " + T +
                         " with a mixture-of-experts model, whose tensor-parallel "
                         "experts are not built yet",
                     "use tp 1 (docs/moe.md says what is next)");
  if (c.mla.enabled())
    throw InputError("fsdp.mesh",
                     "has tp " + T +
                         " with multi-head latent attention, whose tensor-parallel "
                         "plan is not built yet",
                     "use tp 1");
  if (c.explicit_head_dim > 0 || c.qk_norm)
    throw InputError("fsdp.mesh",
                     "has tp " + T +
                         " with Qwen3's decoupled head_dim / q-k norms, which the "
                         "tensor-parallel plan does not shard yet",
                     "use tp 1");
  auto need = [&](const char* field, int64_t v, const std::string& why) {
    if (v % degree != 0)
      throw InputError(
          field,
          "is " + std::to_string(v) + ", not divisible by the tp size " + T + " (" + why + ")",
          "choose a value divisible by " + T + fix_tp);
  };
  if (llama) {
    need("model.n_heads", c.n_heads, "ColwiseParallel wq splits the heads");
    need("model.n_kv_heads", c.n_kv_heads, "ColwiseParallel wk / wv split the kv heads");
    need("model.ffn_dim", c.ffn_dim, "ColwiseParallel w1 / w3 split the hidden units");
  } else {
    need("model.n_heads", c.n_heads, "ColwiseParallel c_attn splits the heads of q, k and v");
    need("model.ffn_dim", c.ffn_dim, "ColwiseParallel c_fc splits the hidden units");
  }
  need("model.vocab_size", c.vocab_size, "the embedding and output shard the vocabulary");
  need("training.seq_len", seq_len, "sequence parallelism shards the sequence");
  const LossImpl loss = c.implementation.loss;
  if (loss == LossImpl::kFp32Output)
    throw InputError(
        "model.implementation.loss",
        "is fp32_output with tp " + T + ", which fullshard does not model",
        "use fp32_logits (the loss's .float() of the gathered or vocab-parallel logits)");
  // The chunked loss runs loss parallel on each chunk's fp32-cast logits (NOTE [Chunked loss
  // under tp] in core/scenario/scenario_checks.cc).
  if (loss_parallel && loss != LossImpl::kFp32Logits && loss != LossImpl::kChunked)
    throw InputError(
        "model.implementation.loss",
        "is " + std::string(loss_impl_name(loss)) + " with tp " + T + " and loss parallel",
        "loss parallel computes in fp32 (logits.float()): use fp32_logits, or set "
        "tensor_parallel.loss_parallel false");
}

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// NOTE [Tensor-parallel plan]'s placements.
void place_llama(Param& p) {
  const std::string& f = p.fqn;
  for (const char* col : {".wq.", ".wk.", ".wv.", ".w1.", ".w3."})
    if (f.find(col) != std::string::npos) p.tp_placement = TpPlacement::kShard0;
  if (ends_with(f, ".wo.weight") || ends_with(f, ".w2.weight"))
    p.tp_placement = TpPlacement::kShard1;
  if (f == "tok_embeddings.weight" || f == "output.weight") p.tp_placement = TpPlacement::kShard0;
}

// NOTE [GPT-2 tensor-parallel plan]'s placements.
void place_gpt2(Param& p) {
  const std::string& f = p.fqn;
  if (f == "wte.weight" || f.find(".mlp.c_fc.") != std::string::npos)
    p.tp_placement = TpPlacement::kShard0;
  if (f.find(".attn.c_attn.") != std::string::npos) {
    p.tp_placement = TpPlacement::kShard0;
    p.tp_blocks = 3;
  }
  if (ends_with(f, ".c_proj.weight")) p.tp_placement = TpPlacement::kShard1;
  if (ends_with(f, ".c_proj.bias")) p.tp_grad_replicated = true;
}

}  // namespace

void apply_tensor_parallel(Module& root, const TensorParallel& tp) {
  if (!tp.enabled()) return;
  const bool gpt2 = root.kind == "GPT2";
  root.for_each_param([&](Param& p) {
    p.tp_degree = tp.degree;
    p.tp_index = tp.index;
    p.tp_placement = TpPlacement::kReplicate;
    if (gpt2)
      place_gpt2(p);
    else
      place_llama(p);
    const TpPlacement pl = p.tp_placement;
    const int64_t dim = pl == TpPlacement::kShard0 ? 0 : 1;
    if (pl != TpPlacement::kReplicate) {
      const std::string& f = p.fqn;
      FULLSHARD_CHECK(p.shape.at(dim) % (tp.degree * p.tp_blocks) == 0,
                      f + ": dim " + std::to_string(dim) + " of size " +
                          std::to_string(p.shape.at(dim)) + " does not split over tp " +
                          std::to_string(tp.degree));
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
void transpose_blocks(Backend& b, const Tensor& in, const Tensor& out, int64_t a, int64_t bb,
                      int64_t inner, const std::string& name) {
  FULLSHARD_CHECK(in.numel() == a * bb * inner && out.numel() == in.numel(),
                  name + ": bad block shape");
  b.launch(kCompute, make_op(OpKind::kTransposeBlocks, name, {in.ref()}, {out.ref()}, 0,
                             TransposeBlocksArgs{a, bb, inner}));
}

void collective(Backend& b, CollectiveKind kind, const Tensor& in, const Tensor& out,
                const ProcessGroup& g, const std::string& name) {
  CollectiveCall call;
  call.kind = kind;
  call.op = ReduceOp::kSum;
  call.name = name;
  call.input = in.ref();
  call.output = out.ref();
  b.collective(kCompute, call, g);
}

}  // namespace

// [B, S/tp, D] -> [B, S, D] (the raw all-gather buffer is freed on return).
Tensor gather_seq(Backend& b, const Tensor& x, const TensorParallel& tp, MemCategory cat,
                  const std::string& name) {
  const Shape& s = x.shape();
  FULLSHARD_CHECK(s.size() == 3, name + ": expects [B, S/tp, D]");
  const int64_t B = s[0], Sl = s[1], D = s[2], T = tp.degree;
  Tensor raw = empty_tensor(b, {x.dtype(), {T * B, Sl, D}}, MemCategory::kTemporary, kCompute,
                             name + " buffer");
  collective(b, CollectiveKind::kAllGather, x, raw, tp.group, name);
  Tensor out = empty_tensor(b, {x.dtype(), {B, Sl * T, D}}, cat, kCompute, name);
  transpose_blocks(b, raw, out, T, B, Sl * D, name + " cat");
  return out;
}

// [B, S, D] -> [B, S/tp, D], summing over the group.
Tensor scatter_seq(Backend& b, const Tensor& x, const TensorParallel& tp, MemCategory cat,
                   const std::string& name) {
  const Shape& s = x.shape();
  FULLSHARD_CHECK(s.size() == 3 && s[1] % tp.degree == 0,
                  name + ": expects [B, S, D] with S divisible by tp");
  const int64_t B = s[0], T = tp.degree, Sl = s[1] / T, D = s[2];
  Tensor staged = empty_tensor(b, {x.dtype(), {T * B, Sl, D}}, MemCategory::kTemporary, kCompute,
                                name + " cat");
  transpose_blocks(b, x, staged, B, T, Sl * D, name + " cat");
  Tensor out = empty_tensor(b, {x.dtype(), {B, Sl, D}}, cat, kCompute, name);
  collective(b, CollectiveKind::kReduceScatter, staged, out, tp.group, name);
  return out;
}

Value all_gather_sequence(ExecContext& c, Value x, const TensorParallel& tp,
                          const std::string& name) {
  Backend& b = c.backend();
  Tensor y = gather_seq(b, x.t, tp, MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, tp, name](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{
                        scatter_seq(b, g[0], tp, MemCategory::kTemporary, name + " backward")};
                  }});
  }
  return out;
}

Value reduce_scatter_sequence(ExecContext& c, Value x, const TensorParallel& tp,
                              const std::string& name) {
  Backend& b = c.backend();
  Tensor y = scatter_seq(b, x.t, tp, MemCategory::kActivation, name);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, tp, name](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{
                        gather_seq(b, g[0], tp, MemCategory::kTemporary, name + " backward")};
                  }});
  }
  return out;
}

Value all_gather_last_dim(ExecContext& c, Value x, const TensorParallel& tp,
                          const std::string& name) {
  Backend& b = c.backend();
  const Shape& s = x.t.shape();
  FULLSHARD_CHECK(s.size() == 3, name + ": expects [B, S, V/tp]");
  const int64_t rows = s[0] * s[1], Vl = s[2], T = tp.degree;
  Tensor raw = empty_tensor(b, {x.t.dtype(), {T, rows, Vl}}, MemCategory::kTemporary, kCompute,
                             name + " buffer");
  collective(b, CollectiveKind::kAllGather, x.t, raw, tp.group, name);
  Tensor y = empty_tensor(b, {x.t.dtype(), {s[0], s[1], Vl * T}}, MemCategory::kActivation,
                           kCompute, name);
  transpose_blocks(b, raw, y, T, rows, Vl, name + " cat");
  raw = Tensor();
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    const int64_t idx = tp.index;
    c.record(Node{name, {x.id}, {out.id}, [&b, Vl, T, idx, s, name](std::vector<Tensor>& g) {
                    Tensor gl = empty_tensor(b, {g[0].dtype(), s}, MemCategory::kTemporary,
                                              kCompute, name + " backward");
                    OpCall op = make_op(OpKind::kNarrowCopy, name + " backward", {g[0].ref()},
                                        {gl.ref()}, 0,
                                        NarrowCopyArgs{.n = Vl,
                                                       .in_width = Vl * T,
                                                       .in_offset = idx * Vl,
                                                       .out_width = Vl,
                                                       .out_offset = 0});
                    b.launch(kCompute, op);
                    return std::vector<Tensor>{gl};
                  }});
  }
  return out;
}

Value rowwise_linear(ExecContext& c, Value x, const Param& weight, const Param& bias,
                     const TensorParallel& tp, const std::string& name) {
  Backend& b = c.backend();
  Tensor w = detail::param_tensor(weight);
  const int64_t K = weight.shape[1], N = weight.shape[0];
  FULLSHARD_CHECK(x.t.shape().back() == K, name + ": input features do not match the weight");
  const int64_t M = x.t.numel() / K;
  Shape s = x.t.shape();
  s.back() = N;
  Tensor y = c.empty({w.dtype(), s}, MemCategory::kActivation, name);
  {
    // Replicate -> Partial of the bias: Partial._partition_value divides by the group size.
    Tensor bt = detail::param_tensor(bias);
    Tensor part = c.empty(bt.meta(), MemCategory::kTemporary, name + " bias / tp");
    c.launch(make_op(OpKind::kScale, name + " bias / tp", {bt.ref()}, {part.ref()},
                     detail::el(part), ScalarArgs{1.0 / static_cast<double>(tp.degree)}));
    c.launch(make_op(OpKind::kLinear, name, {x.t.ref(), w.ref(), part.ref()}, {y.ref()},
                     2.0 * M * K * N, LinearArgs{M, K, N}));
  }
  Value out = result(c, y, true);
  if (c.recording()) {
    const Param* pw = &weight;
    const Param* pb = &bias;
    Tensor xs = x.t;
    c.record(
        Node{name,
             {x.id},
             {out.id},
             [&b, pw, pb, xs, M, K, N, name, need = x.requires_grad()](std::vector<Tensor>& g) {
               Tensor gx;
               if (need) {
                 gx = detail::grad_like(b, xs, name + " grad_input");
                 b.launch(kCompute, make_op(OpKind::kLinearBackwardInput, name + " backward_input",
                                            {g[0].ref(), pw->binding->unsharded().ref()},
                                            {gx.ref()}, 2.0 * M * K * N, LinearArgs{M, K, N}));
               }
               Tensor gw = detail::new_param_grad(b, *pw);
               b.launch(kCompute, make_op(OpKind::kLinearBackwardWeight, name + " backward_weight",
                                          {g[0].ref(), xs.ref()}, {gw.ref()}, 2.0 * M * K * N,
                                          LinearArgs{M, K, N}));
               pw->binding->accumulate_grad(b, std::move(gw));
               // The Partial -> Replicate redistribute's backward leaves the gathered
               // gradient Replicate: the bias gradient is complete on every rank.
               Tensor gb = detail::new_param_grad(b, *pb);
               b.launch(kCompute,
                        make_op(OpKind::kLinearBackwardBias, name + " backward_bias", {g[0].ref()},
                                {gb.ref()}, static_cast<double>(M * N), LinearBiasArgs{M, N}));
               pb->binding->accumulate_grad(b, std::move(gb));
               return std::vector<Tensor>{gx};
             }});
  }
  return out;
}

Tensor all_reduce_clone(Backend& b, const Tensor& t, ReduceOp op, const ProcessGroup& group,
                        MemCategory category, const std::string& name) {
  Tensor out = empty_tensor(b, t.meta(), category, kCompute, name);
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

Tensor all_reduce_grad(Backend& b, const Tensor& grad, const ProcessGroup& group,
                       const std::string& name) {
  return all_reduce_clone(b, grad, ReduceOp::kSum, group, MemCategory::kUnshardedGrad, name);
}

}  // namespace ops::tp
}  // namespace fullshard
