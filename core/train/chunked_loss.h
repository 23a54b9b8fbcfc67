#pragma once
// torchtitan's ChunkedLossWrapper (torchtitan/components/loss.py at pytorch/torchtitan@b5bcd76):
// the loss of a model run with `_skip_lm_head`, computed chunk by chunk over the tokens, each
// chunk's output projection, cross-entropy and backward run before the next chunk, so that
// only one chunk's logits exist at a time. NOTE [Chunked loss] in chunked_loss.cc.
#include "core/fsdp/fully_shard.h"
#include "core/model/transformer.h"

namespace fullshard {

struct ChunkedLossOptions {
  int chunks = 8;           // ChunkedLossWrapper.Config.num_chunks
  double grad_scale = 1.0;  // the backward seed of the whole loss (1 / gradient accumulation steps)
};

// `h`: the final norm's output [B, S, D] (Transformer::hidden_forward); `labels`: [B, S].
// Returns the mean loss over the tokens (fp32 scalar). When `c` records, each chunk's backward
// has run when this returns, and the returned loss's backward hands the accumulated gradient
// of `h` to the decoder (_DecoderOutputGradientBackProp); otherwise only the forward runs.
Value chunked_loss(ExecContext& c, Transformer& model, FSDPRuntime& fsdp, Value h,
                   const Tensor& labels, const ChunkedLossOptions& o);

}  // namespace fullshard
