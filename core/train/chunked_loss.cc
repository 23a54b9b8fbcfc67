#include "core/train/chunked_loss.h"

#include <string>

#include "core/common/error.h"
#include "core/model/ops.h"
#include "core/model/tensor_parallel.h"

namespace fullshard {

namespace {
constexpr StreamRole kCurrent = StreamRole::kDefault;
}

// NOTE [Chunked loss]: what torchtitan's ChunkedLossWrapper.__call__ does (torchtitan/components/
// loss.py at pytorch/torchtitan@b5bcd76), op by op, and what fullshard plays for each step:
// 1. `GradAccumulator(hidden_states, dtype=float32)`: torch.zeros_like, an fp32 [T, D] buffer.
//    `total_loss = hidden_states.new_zeros(())`: an fp32 scalar.
// 2. The output module's FSDP state (its own unit, or with the final norm in
//    fully_shard([norm, output]), or, tied, fully_shard([tok_embeddings, norm, output]): the
//    calls act on the whole group, NOTE [Tied embeddings unit]): set_reshard_after_forward(False),
//    set_reshard_after_backward(False), set_requires_gradient_sync(False, recurse=False), and
//    lm_head.unshard() (a no-op when the forward left it unsharded).
// 3. Per chunk i of the T = B x S tokens (T / num_chunks rows each, split along the token
//    dimension: views, `.contiguous()` copies nothing): a detached leaf `h_i` requiring grad;
//    before the last chunk set_requires_gradient_sync(True); `logits = lm_head(h_i)` through
//    the module's hooks; CrossEntropyLoss = F.cross_entropy(logits.float(), labels,
//    reduction="sum") / global tokens; `total_loss = total_loss + chunk_loss.detach()`;
//    `chunk_loss.backward()`: the logits' gradient, lm_head's weight gradient and h_i's
//    gradient, which GradAccumulator.add casts to fp32 (`.to`, a temporary) and copies into
//    its slice; then `h_chunk.grad = None`.
//    FSDP under this loop (NOTE [Grouped units]): the chunk calls are one pass of the unit's
//    state (its post-forward never runs: the norm does not run again), so only the first chunk's
//    call registers the post-backward hook. Chunk 0's backward runs the unit's post-backward
//    without gradient sync (the weight gradient moves to an fp32 accumulated gradient,
//    FSDPParam.to_accumulated_grad_if_needed; nothing is resharded); chunks 1.. accumulate into
//    the unsharded .grad; the sync set before the last chunk takes effect in the decoder
//    backward, where the norm's post-backward reduce-scatters output and norm gradients
//    together (tied: the embedding's backward adds its gradient to the same weight's, and the
//    root's final callback reduce-scatters the group). (The wrapper's docstring speaks of a
//    reduce-scatter per chunk; PyTorch's one-shot hook registration for grouped units gives the
//    above.)
// 4. set_reshard_after_forward(True), set_reshard_after_backward(True),
//    set_requires_gradient_sync(True), lm_head.reshard(). From then on the unit reshards after
//    forward (the wrapper sets True whatever fully_shard was given), so the next step
//    all-gathers it again for the loop.
// 5. `accumulated_grad = result().to(hidden_states.dtype)`, and the returned loss's backward
//    (_DecoderOutputGradientBackProp) hands it to the decoder as h's gradient; the fp32
//    buffer is freed when __call__ returns.
// Loss scaling: torchtitan sums the token losses, divides by the global token count and turns
// FSDP's gradient division off (disable_fsdp_gradient_division). fullshard keeps its mean loss
// and FSDP's averaging (the same gradient for equal token counts, no ignored labels): each
// chunk's cross-entropy is the chunk's mean, its backward seed is grad_scale / num_chunks, and
// the reported loss is the sum of the chunk means over num_chunks. The scalar divisions by the
// token count (512-byte blocks) are not played.
Value chunked_loss(ExecContext& c, Transformer& model, FSDPRuntime& fsdp, Value h,
                   const Tensor& labels, const ChunkedLossOptions& o) {
  Backend& b = c.backend();
  const int n = o.chunks;
  const int64_t D = h.t.shape().back();
  const int64_t T = h.t.numel() / D;
  FULLSHARD_CHECK(n >= 1 && T % n == 0,
                  "chunked loss: the tokens of a micro-batch must divide into the chunks");
  const int64_t rows = T / n;
  const bool grad = c.recording() && h.requires_grad();
  const DType hdt = h.t.dtype();

  Tensor acc;
  if (grad) {
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
    Value leaf{hi, grad ? cc.new_id() : 0};
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
    fill.fargs = {o.grad_scale / static_cast<double>(n)};
    b.launch(kCurrent, fill);
    const uint64_t loss_id = loss.id;
    Tensor gi = cg.backward(b, loss_id, std::move(seed), leaf_id);
    loss = Value{};
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
  if (!grad) return Value{total, 0};
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
