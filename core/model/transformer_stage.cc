// A pipeline stage's forward (Transformer::stage_forward): torchtitan's Decoder.forward over the
// modules _pipeline_module_split kept (torchtitan/distributed/pipeline_parallel.py at
// pytorch/torchtitan@b5bcd76c6): `h = tok_embeddings(tokens) if tok_embeddings else tokens`,
// the stage's layers, then `norm` and `output` when present. The same ops, module calls and
// lifetimes as the whole model's root forward (transformer.cc), for the modules the part has.
#include <optional>

#include "core/common/error.h"
#include "core/model/transformer.h"

namespace fullshard {

Value Transformer::stage_forward(ExecContext& c, const Tensor* tokens, Value input,
                                 const std::vector<BlockCheckpoint>& block_ac) {
  FULLSHARD_CHECK(part_.has_value(), "stage_forward needs a model part");
  const auto& cfg = config_;
  const ModelPart& part = *part_;
  FULLSHARD_CHECK(part.embeddings == (tokens != nullptr),
                  "the first stage takes tokens, the others the previous stage's output");
  int64_t batch = 0, seq = 0;
  if (tokens) {
    FULLSHARD_CHECK(tokens->shape().size() == 2, "tokens must be [B, S]");
    batch = tokens->shape()[0];
    seq = tokens->shape()[1];
  } else {
    FULLSHARD_CHECK(input.t.shape().size() == 3, "a stage's input must be [B, S, D]");
    batch = input.t.shape()[0];
    seq = input.t.shape()[1] * tp_.degree;  // sequence parallel: each tp rank holds S / tp
  }
  Value root_in = tokens ? Value{*tokens, 0} : std::move(input);
  return c.call_module(root_, std::move(root_in), [&](ExecContext& rc, Value in) {
    Value h;
    if (part.embeddings) {
      Module& emb = root_.child("tok_embeddings");
      if (edge_module_calls_)
        h = rc.call_module(emb, in, [&emb](ExecContext& ec, Value ids) {
          return ops::embedding(ec, ids.t, emb.param("weight"), "tok_embeddings");
        });
      else
        h = ops::embedding(rc, in.t, emb.param("weight"), "tok_embeddings");
      if (tp_.enabled())
        h = ops::tp::reduce_scatter_sequence(rc, std::move(h), tp_,
                                             "tok_embeddings reduce_scatter(seq)");
    } else {
      h = in;
    }
    in = Value{};
    std::optional<ops::RotaryTables> rot;
    if (cfg.implementation.rope == RopeImpl::kRotateHalf)
      rot = ops::rotary_cos_sin(rc, batch, seq, cfg.head_dim(), rope(), h.t.dtype(), "rotary_emb");
    for (Module* bp : blocks_) {
      Module& b = *bp;
      const size_t layer = static_cast<size_t>(std::stoll(b.fqn.substr(b.fqn.rfind('.') + 1)));
      BlockCheckpoint ac = layer < block_ac.size() ? block_ac[layer] : BlockCheckpoint::kNone;
      h = rc.call_module(b, std::move(h), [&](ExecContext& bc, Value x) {
        auto body = [this, &b, batch, seq, rot](ExecContext& cc, Value v) {
          return block_forward(cc, b, std::move(v), batch, seq, rot ? &*rot : nullptr);
        };
        if (ac == BlockCheckpoint::kNone) return body(bc, std::move(x));
        return checkpoint(bc, std::move(x), body, ac == BlockCheckpoint::kOpSelective, b.fqn);
      });
    }
    rot.reset();
    if (!part.head) return h;
    Module& norm = root_.child("norm");
    if (edge_module_calls_)
      h = rc.call_module(norm, std::move(h), [this, &norm](ExecContext& nc, Value v) {
        return rms_norm(nc, std::move(v), norm.param("weight"), "norm");
      });
    else
      h = rms_norm(rc, std::move(h), norm.param("weight"), "norm");
    if (tp_.enabled())
      h = ops::tp::all_gather_sequence(rc, std::move(h), tp_, "output all_gather(seq)");
    Value logits = edge_module_calls_
                       ? output_forward(rc, std::move(h))
                       : ops::linear(rc, std::move(h), root_.child("output").param("weight"),
                                     nullptr, "output");
    if (cfg.implementation.loss == LossImpl::kFp32Output)
      logits = ops::to_float(rc, std::move(logits), "output");
    return logits;
  });
}

}  // namespace fullshard
