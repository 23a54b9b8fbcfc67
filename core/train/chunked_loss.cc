#include "core/train/chunked_loss.h"

#include <string>

#include "core/common/error.h"
#include "core/model/ops.h"
#include "core/model/tensor_parallel.h"
#include "core/runtime/copy_args.h"

namespace fullshard {

namespace {
constexpr StreamRole kCurrent = StreamRole::kDefault;
}

// NOTE [Chunked loss]: what torchtitan's ChunkedLossWrapper.__call__ does
// (torchtitan/components/loss.py at pytorch/torchtitan@b5bcd76), op by op, is what fullshard plays
// each step (docs/ops.md, "Chunked loss, op by op", has every call). An fp32 [T, D]
// GradAccumulator; the output unit's FSDP state set to stay unsharded without gradient sync (the
// calls act on the whole group, NOTE [Tied embeddings unit]); per chunk of the T = B x S tokens, a
// detached leaf through lm_head, a summed cross-entropy and its backward, whose h-gradient is cast
// to fp32 into the accumulator; sync back on before the last chunk; then the unit reshards after
// forward from then on, and the accumulator, cast back, is the decoder's h gradient.
// FSDP sees one pass of the unit (NOTE [Grouped units]): only the first chunk registers the
// post-backward hook, chunk 0's gradient moves to an fp32 accumulated gradient, and the output and
// norm gradients are reduce-scattered once, in the decoder backward.
// Loss scaling: fullshard keeps its mean loss and FSDP's averaging (a chunk's backward seed is
// grad_scale / num_chunks), torchtitan's gradient for equal token counts and no ignored labels.
Value chunked_loss(ExecContext& c, Transformer& model, FSDPRuntime& fsdp, Value h,
                   const Tensor& labels, const ChunkedLossOptions& o) {
  Backend& b = c.backend();
  const int n = o.chunks;
  const int64_t D = h.t.shape().back();
  const int64_t T = h.t.numel() / D;
  FULLSHARD_CHECK(n >= 1 && T % n == 0,
                  "chunked loss: the tokens of a micro-batch must divide into the chunks");
  const int64_t rows = T / n;
  // With frozen parameters (NOTE [Frozen parameters] in core/model/lora.cc) the hidden states
  // may need no grad while the output's weight does: each chunk still runs its backward.
  bool out_trainable = false;
  model.output_module().for_each_param([&](Param& p) { out_trainable |= p.requires_grad; });
  if (model.config().tie_embeddings && !model.part())
    out_trainable |= model.root().child("tok_embeddings").param("weight").requires_grad;
  const bool h_grad = c.recording() && h.requires_grad();
  const bool grad = h_grad || (c.recording() && out_trainable);
  const DType hdt = h.t.dtype();

  Tensor acc;
  if (h_grad) {
    // zeros_like(hidden_states) in fp32: h's shape, so the decoder's backward (under tp, the
    // norm's sequence all-gather) gets a gradient shaped like its output.
    acc = c.empty({DType::kFloat32, h.t.shape()}, MemCategory::kTemporary,
                  "chunked loss grad accumulator");
    ops::fill_zero(b, kCurrent, acc, "chunked loss grad accumulator zeros");
  }
  Tensor total = c.empty({DType::kFloat32, {}}, MemCategory::kActivation, "total_loss");
  ops::fill_zero(b, kCurrent, total, "total_loss zeros");

  FSDPState* st = fsdp.state_of(model.output_module());
  FSDPParamGroup* g = st ? st->group.get() : nullptr;
  if (g) {
    g->set_reshard_after_forward(false);
    g->set_reshard_after_backward(false);
    g->set_requires_gradient_sync(false);
    g->unshard();
    g->wait_for_unshard();
  }
  for (int i = 0; i < n; ++i) {
    if (g && i == n - 1) g->set_requires_gradient_sync(true);
    const std::string name = "loss chunk " + std::to_string(i);
    Tensor hi = h.t.view({hdt, {rows, D}}, static_cast<uint64_t>(i * rows * D) * dtype_size(hdt));
    Tensor li = labels.view({labels.dtype(), {rows}},
                            static_cast<uint64_t>(i * rows) * dtype_size(labels.dtype()));
    Graph cg;
    ExecContext cc(b, grad ? &cg : nullptr, &fsdp);
    Value leaf{hi, h_grad ? cc.new_id() : 0};
    const uint64_t leaf_id = leaf.id;
    hi = Tensor();
    Value logits = model.output_forward(cc, std::move(leaf));
    // Under tp the chunk's logits are this rank's vocab columns: loss parallel's cross-entropy
    // (its all-reduces of the row max, the exp sums and the picked logits), as unchunked.
    const TensorParallel& tp = model.tensor_parallel();
    Value loss = tp.enabled()
                     ? ops::tp::vocab_parallel_cross_entropy(cc, std::move(logits), li, tp, name)
                     : ops::cross_entropy(cc, std::move(logits), li, name, true);
    Tensor sum = ops::add_new(b, total, loss.t, MemCategory::kActivation, "total_loss + " + name);
    total = std::move(sum);
    if (!grad) continue;
    Tensor seed = c.empty(loss.t.meta(), MemCategory::kTemporary, name + " grad seed");
    OpCall fill;
    fill.kind = OpKind::kFill;
    fill.name = name + " ones_like";
    fill.outputs = {seed.ref()};
    FillArgs{o.grad_scale / static_cast<double>(n)}.encode(fill);
    b.launch(kCurrent, fill);
    const uint64_t loss_id = loss.id;
    Tensor gi = cg.backward(b, loss_id, std::move(seed), leaf_id);
    loss = Value{};
    if (!h_grad) continue;  // only the output's weight wanted a gradient
    FULLSHARD_CHECK(static_cast<bool>(gi),
                    "chunked loss: no gradient reached the hidden states of " + name);
    // `.to(float32)` is the tensor itself when already fp32, else a copy.
    Tensor g32 = gi.dtype() == DType::kFloat32
                     ? gi
                     : ops::cast(b, kCurrent, gi, DType::kFloat32, MemCategory::kTemporary,
                                 name + " grad.to(fp32)");
    gi = Tensor();
    Tensor slot = acc.view({DType::kFloat32, {rows, D}}, static_cast<uint64_t>(i * rows * D) * 4);
    ops::copy_into(b, kCurrent, slot, g32, name + " grad into accumulator");
  }
  if (g) {
    g->set_reshard_after_forward(true);
    g->set_reshard_after_backward(true);
    g->set_requires_gradient_sync(true);
    g->reshard();
  }
  ops::scale_inplace(b, kCurrent, total, 1.0 / static_cast<double>(n), "total_loss / chunks");
  if (!h_grad) return Value{total, 0};
  Tensor accumulated = hdt == DType::kFloat32
                           ? acc
                           : ops::cast(b, kCurrent, acc, hdt, MemCategory::kTemporary,
                                       "chunked loss accumulated grad");
  acc = Tensor();
  Value out{total, c.new_id()};
  c.record(Node{"chunked loss", {h.id}, {out.id}, [accumulated](std::vector<Tensor>&) mutable {
                  return std::vector<Tensor>{std::move(accumulated)};
                }});
  return out;
}

}  // namespace fullshard
