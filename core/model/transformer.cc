#include "core/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/common/error.h"
#include "core/model/async_tp.h"
#include "core/model/attention_variants.h"
#include "core/model/ring_attention.h"
#include "core/model/compiled_block.h"
#include "core/model/lora.h"
#include "core/model/mla_attention.h"
#include "core/model/moe_layer.h"
#include "core/model/ops.h"

namespace fullshard {
namespace {
Module* find_child(Module& m, const std::string& name) {  // null when m has no such child
  const std::string fqn = m.fqn.empty() ? name : m.fqn + "." + name;
  for (auto& ch : m.children)
    if (ch->fqn == fqn) return ch.get();
  return nullptr;
}
// A block's linear: nn.Linear, or PEFT's LoRA layer around it when it carries adapters.
Value project(ExecContext& c, Value x, Module& lin, const Param* bias, const ModelConfig& cfg,
              const std::string& name) {
  if (has_lora(lin)) return ops::lora_linear(c, std::move(x), lin, bias, cfg.lora.scaling(), name);
  return ops::linear(c, std::move(x), lin.param("weight"), bias, name);
}
}  // namespace

Transformer::Transformer(ModelConfig config, TensorParallel tp, ExpertParallel ep)
    : config_(std::move(config)), tp_(std::move(tp)), ep_(std::move(ep)) {
  build();
}

Transformer::Transformer(ModelConfig config, TensorParallel tp, ModelPart part, ExpertParallel ep)
    : config_(std::move(config)), tp_(std::move(tp)), ep_(std::move(ep)), part_(part) {
  FULLSHARD_CHECK(config_.arch == ModelArch::kLlama && !config_.tie_embeddings,
                  "a pipeline stage's model part needs an untied Llama (scenario_pipeline.cc)");
  build();
}

void Transformer::build() {
  const auto& c = config_;
  const int64_t D = c.dim, F = c.ffn_dim, hd = c.head_dim(), kv = c.n_kv_heads * hd;
  const int64_t Q = c.n_heads * hd;  // == D unless the head size is decoupled (Qwen3)
  root_.kind = c.arch == ModelArch::kLlama ? "Transformer" : "GPT2";
  if (c.arch == ModelArch::kLlama) {
    if (!part_ || part_->embeddings)
      root_.add_child("tok_embeddings", "Embedding")->add_param("weight", {c.vocab_size, D});
  } else {
    root_.add_child("wte", "Embedding")->add_param("weight", {c.vocab_size, D});
    root_.add_child("wpe", "Embedding")->add_param("weight", {c.max_seq_len, D});
  }
  Module* layers = root_.add_child("layers", "ModuleList");
  for (int64_t i = 0; i < c.n_layers; ++i) {
    if (part_ && (i < part_->first_layer || i >= part_->first_layer + part_->num_layers)) continue;
    Module* b = layers->add_child(std::to_string(i), "TransformerBlock");
    blocks_.push_back(b);
    if (c.arch == ModelArch::kLlama) {
      b->add_child("attention_norm", "RMSNorm")->add_param("weight", {D});
      Module* a = b->add_child("attention", "Attention");
      if (c.mla.enabled()) {  // DeepSeek's multi-head latent attention (mla_attention.h)
        add_mla_attention(*a, c);
      } else {
        a->add_child("wq", "Linear")->add_param("weight", {Q, D});
        a->add_child("wk", "Linear")->add_param("weight", {kv, D});
        a->add_child("wv", "Linear")->add_param("weight", {kv, D});
        if (c.qkv_bias) {
          a->child("wq").add_param("bias", {Q});
          a->child("wk").add_param("bias", {kv});
          a->child("wv").add_param("bias", {kv});
        }
        a->add_child("wo", "Linear")->add_param("weight", {D, Q});
        if (c.qk_norm) {  // Qwen3: RMSNorm over each head of q and k, before RoPE
          a->add_child("q_norm", "RMSNorm")->add_param("weight", {hd});
          a->add_child("k_norm", "RMSNorm")->add_param("weight", {hd});
        }
      }
      b->add_child("ffn_norm", "RMSNorm")->add_param("weight", {D});
      if (c.moe.is_moe_layer(i)) {  // torchtitan's `moe` in place of `feed_forward`
        add_moe_module(*b, c, ep_);
        continue;
      }
      Module* f = b->add_child("feed_forward", "FeedForward");
      f->add_child("w1", "Linear")->add_param("weight", {F, D});
      f->add_child("w2", "Linear")->add_param("weight", {D, F});
      f->add_child("w3", "Linear")->add_param("weight", {F, D});
    } else {
      Module* ln1 = b->add_child("ln_1", "LayerNorm");
      ln1->add_param("weight", {D});
      ln1->add_param("bias", {D});
      Module* a = b->add_child("attn", "CausalSelfAttention");
      Module* ca = a->add_child("c_attn", "Linear");
      ca->add_param("weight", {3 * D, D});
      ca->add_param("bias", {3 * D});
      Module* cp = a->add_child("c_proj", "Linear");
      cp->add_param("weight", {D, D});
      cp->add_param("bias", {D});
      Module* ln2 = b->add_child("ln_2", "LayerNorm");
      ln2->add_param("weight", {D});
      ln2->add_param("bias", {D});
      Module* m = b->add_child("mlp", "MLP");
      Module* fc = m->add_child("c_fc", "Linear");
      fc->add_param("weight", {F, D});
      fc->add_param("bias", {F});
      Module* mp = m->add_child("c_proj", "Linear");
      mp->add_param("weight", {D, F});
      mp->add_param("bias", {D});
    }
  }
  if (c.arch == ModelArch::kLlama && part_ && !part_->head) {
    // a pipeline stage before the last: no norm, no output
  } else if (c.arch == ModelArch::kLlama) {
    root_.add_child("norm", "RMSNorm")->add_param("weight", {D});
    if (!c.tie_embeddings)
      root_.add_child("output", "Linear")->add_param("weight", {c.vocab_size, D});
    // A chunked loss calls the output as a module (NOTE [Tied output module]).
    if (c.tie_embeddings && c.implementation.loss == LossImpl::kChunked) {
      root_.add_child("output", "Linear");
      has_output_module_ = true;
    }
    add_moe_aux_loss_buffers(root_, c.moe);  // NOTE [Auxiliary load-balancing loss]
  } else {
    Module* lnf = root_.add_child("ln_f", "LayerNorm");
    lnf->add_param("weight", {D});
    lnf->add_param("bias", {D});
  }
  // NOTE [Init]: GPT-2 / nanoGPT's init_weights for both architectures: weights N(0, 0.02),
  // the projections back into the residual stream N(0, 0.02 / sqrt(2 * n_layers)), biases 0,
  // norm weights 1 (LayerNorm bias 0).
  const double residual_std =
      0.02 / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(c.n_layers, 1)));
  root_.for_each_module([&](Module& m) {
    for (Param& p : m.params) {
      const bool is_bias = p.fqn.size() >= 5 && p.fqn.compare(p.fqn.size() - 5, 5, ".bias") == 0;
      if (is_bias) {
        p.init = ParamInit::kZeros;
      } else if (m.kind == "RMSNorm" || m.kind == "LayerNorm") {
        p.init = ParamInit::kOnes;
      } else {
        p.init = ParamInit::kNormal;
        const auto ends = [&](const char* s) {
          std::string suf(s);
          return m.fqn.size() >= suf.size() &&
                 m.fqn.compare(m.fqn.size() - suf.size(), suf.size(), suf) == 0;
        };
        p.init_std = (ends(".wo") || ends(".w2") || ends(".c_proj")) ? residual_std : 0.02;
      }
    }
  });
  // PEFT's adapters come after the base init (NOTE [LoRA] in lora.cc: their own init).
  if (c.lora.enabled()) add_lora_adapters(root_, c.lora);
  set_init_seed(root_, 0);
  if (tp_.enabled()) apply_tensor_parallel(root_, tp_);
}

Value Transformer::sublayer_input(ExecContext& c, Value x, const std::string& name) {
  if (!tp_.enabled()) return x;
  return ops::tp::all_gather_sequence(c, std::move(x), tp_, name + " all_gather(seq)");
}

Value Transformer::sublayer_output(ExecContext& c, Value y, const std::string& name) {
  if (!tp_.enabled()) return y;
  return ops::tp::reduce_scatter_sequence(c, std::move(y), tp_, name + " reduce_scatter(seq)");
}

Value Transformer::rms_norm(ExecContext& c, Value x, const Param& weight, const std::string& name) {
  if (config_.implementation.rms_norm == NormImpl::kEager)
    return ops::rms_norm_eager(c, std::move(x), weight, config_.norm_eps, name);
  return ops::rms_norm(c, std::move(x), weight, config_.norm_eps, name);
}

// Qwen3's q_norm / k_norm: xq.view(B, S, H, hd) through an RMSNorm of head_dim, so each head's
// row is normalised; the projection's [B, S, H * hd] viewed as rows of hd and back.
Value Transformer::head_norm(ExecContext& c, Value x, const Param& weight, int64_t heads,
                             const std::string& name) {
  const Shape shape = x.t.shape();
  const int64_t hd = config_.head_dim(), rows = x.t.numel() / (heads * hd);
  Value v{x.t.view({x.t.dtype(), {rows, heads, hd}}), x.id};
  x = Value{};
  Value y = rms_norm(c, std::move(v), weight, name);
  y.t = y.t.view({y.t.dtype(), shape});
  return y;
}

Value Transformer::llama_attention(ExecContext& c, Module& m, Value x, int64_t batch, int64_t seq,
                                   const ops::RotaryTables* rot) {
  const auto& cfg = config_;
  if (cfg.mla.enabled()) {  // RoPE of qk_rope_head_dim (NOTE [Multi-head latent attention])
    FULLSHARD_CHECK(!tp_.enabled() && !cp_.enabled(), m.fqn + ": MLA runs without tp or cp");
    return mla_attention(c, m, std::move(x), batch, seq, cfg, rope());
  }
  const int64_t T = tp_.degree;  // heads are split over tp (ColwiseParallel wq / wk / wv)
  ops::AttentionShape s{batch, seq, cfg.n_heads / T, cfg.n_kv_heads / T, cfg.head_dim()};
  auto bias = [&](const char* lin) -> const Param* {
    return cfg.qkv_bias ? &m.child(lin).param("bias") : nullptr;
  };
  const std::string& n = m.fqn;
  Value q, k, v, held;
  if (tp_.async) {  // NOTE [Async TP] in async_tp.cc: the gather and wq / wk / wv as one op
    auto qkv =
        ops::tp::all_gather_linears(c, std::move(x),
                                    {&m.child("wq").param("weight"), &m.child("wk").param("weight"),
                                     &m.child("wv").param("weight")},
                                    {n + ".wq", n + ".wk", n + ".wv"}, tp_, n + " all_gather(seq)");
    q = std::move(qkv[0]);
    k = std::move(qkv[1]);
    v = std::move(qkv[2]);
  } else {
    x = sublayer_input(c, std::move(x), n);
    held = x;  // PrepareModuleInput's output is forward's argument until it returns
    q = project(c, x, m.child("wq"), bias("wq"), cfg, n + ".wq");
    k = project(c, x, m.child("wk"), bias("wk"), cfg, n + ".wk");
    v = project(c, std::move(x), m.child("wv"), bias("wv"), cfg, n + ".wv");
  }
  if (cfg.qk_norm) {
    q = head_norm(c, std::move(q), m.child("q_norm").param("weight"), s.heads, n + ".q_norm");
    k = head_norm(c, std::move(k), m.child("k_norm").param("weight"), s.kv_heads, n + ".k_norm");
  }
  const ModelImplementation& impl = cfg.implementation;
  if (impl.compile) {  // one fused region over q and k (NOTE [Compiled block])
    auto qk = ops::compiled::rope(c, std::move(q), std::move(k), s.head_dim, rope(),
                                  impl.rope == RopeImpl::kComplex, n + ".rope");
    q = std::move(qk.first);
    k = std::move(qk.second);
  } else if (impl.rope == RopeImpl::kComplex) {
    auto qk = ops::rope_complex(c, std::move(q), std::move(k), s.head_dim, rope(), n + ".rope_q",
                                n + ".rope_k");
    q = std::move(qk.first);
    k = std::move(qk.second);
  } else if (impl.rope == RopeImpl::kRotateHalf) {
    FULLSHARD_CHECK(rot != nullptr, n + ": rope = rotate_half without cos / sin tables");
    auto qk = ops::rope_rotate_half(c, std::move(q), std::move(k), *rot, s.head_dim, n + ".rope_q",
                                    n + ".rope_k");
    q = std::move(qk.first);
    k = std::move(qk.second);
  } else {
    q = ops::rope(c, std::move(q), s.head_dim, rope(), n + ".rope_q");
    k = ops::rope(c, std::move(k), s.head_dim, rope(), n + ".rope_k");
  }
  if (impl.gqa == GqaImpl::kRepeatKV && s.kv_heads != s.heads) {
    // keys = repeat_kv(xk); values = repeat_kv(xv); then xk / xv rebind to the copies.
    const int64_t n_rep = s.heads / s.kv_heads;
    Value keys = ops::repeat_kv(c, k, s.kv_heads, n_rep, s.head_dim, n + ".repeat_kv_k");
    Value values = ops::repeat_kv(c, v, s.kv_heads, n_rep, s.head_dim, n + ".repeat_kv_v");
    k = std::move(keys);
    v = std::move(values);
    s.kv_heads = s.heads;
  }
  // Under context parallelism the SDPA call is ring attention over the cp group (its shape is
  // this rank's L = S / cp tokens; check_context_parallel keeps it flash).
  Value o = cp_.enabled() ? ops::cp::ring_attention(c, std::move(q), std::move(k), std::move(v), s,
                                                    cp_, n + ".sdpa")
            : impl.attention == AttentionImpl::kFlash
                ? ops::attention(c, std::move(q), std::move(k), std::move(v), s, n + ".sdpa")
                : ops::attention_sdpa(c, std::move(q), std::move(k), std::move(v), s,
                                      impl.attention, n + ".sdpa");
  Value ot = ops::transpose_heads(c, std::move(o), s, n + ".transpose");
  if (tp_.async)
    return ops::tp::linear_reduce_scatter(c, std::move(ot), m.child("wo").param("weight"), tp_,
                                          n + ".wo");
  return sublayer_output(c, project(c, std::move(ot), m.child("wo"), nullptr, cfg, n + ".wo"), n);
}

Value Transformer::gpt2_projection(ExecContext& c, Module& proj, Value x, const std::string& name) {
  if (!tp_.enabled())
    return ops::linear(c, std::move(x), proj.param("weight"), &proj.param("bias"), name);
  // RowwiseParallel(output_layouts=Shard(1)) with its replicated bias (NOTE [GPT-2
  // tensor-parallel plan] in tensor_parallel.cc).
  Value partial =
      ops::tp::rowwise_linear(c, std::move(x), proj.param("weight"), proj.param("bias"), tp_, name);
  const std::string module = name.substr(0, name.rfind('.'));
  return sublayer_output(c, std::move(partial), module);
}

Value Transformer::gpt2_attention(ExecContext& c, Module& m, Value x, int64_t batch, int64_t seq) {
  const auto& cfg = config_;
  // Heads are split over tp (c_attn colwise over each of q, k, v).
  ops::AttentionShape s{batch, seq, cfg.n_heads / tp_.degree, cfg.n_heads / tp_.degree,
                        cfg.head_dim()};
  const std::string& n = m.fqn;
  Module& ca = m.child("c_attn");
  x = sublayer_input(c, std::move(x), n);
  const Value held = x;  // PrepareModuleInput's output is forward's argument until it returns
  Value qkv = ops::linear(c, std::move(x), ca.param("weight"), &ca.param("bias"), n + ".c_attn");
  Value o = ops::attention_packed(c, std::move(qkv), s, n + ".sdpa");
  Value ot = ops::transpose_heads(c, std::move(o), s, n + ".transpose");
  return gpt2_projection(c, m.child("c_proj"), std::move(ot), n + ".c_proj");
}

Value Transformer::block_forward(ExecContext& c, Module& b, Value x, int64_t batch, int64_t seq,
                                 const ops::RotaryTables* rot) {
  const auto& cfg = config_;
  const std::string& n = b.fqn;
  if (cfg.arch == ModelArch::kLlama && cfg.implementation.compile)
    return compiled_llama_block(c, b, std::move(x), batch, seq, rot);
  if (cfg.arch == ModelArch::kLlama) {
    Value xn = rms_norm(c, x, b.child("attention_norm").param("weight"), n + ".attention_norm");
    Value a = c.call_module(b.child("attention"), std::move(xn), [&](ExecContext& cc, Value v) {
      return llama_attention(cc, b.child("attention"), std::move(v), batch, seq, rot);
    });
    Value h = ops::add(c, std::move(x), std::move(a), n + ".residual_attn");
    Value hn = rms_norm(c, h, b.child("ffn_norm").param("weight"), n + ".ffn_norm");
    if (Module* moe = find_child(b, "moe")) {  // core/model/moe_layer.h
      Value f = c.call_module(*moe, std::move(hn), [&](ExecContext& cc, Value v) {
        return moe_forward(cc, *moe, std::move(v), cfg, ep_, &ep_permuted_indices_[moe],
                           aux_.enabled() ? &aux_ : nullptr);
      });
      return ops::add(c, std::move(h), std::move(f), n + ".residual_ffn");
    }
    Module& ff = b.child("feed_forward");
    Value f = c.call_module(ff, std::move(hn), [&](ExecContext& cc, Value v) {
      const std::string& fn = ff.fqn;
      if (tp_.async) {  // NOTE [Async TP]: the gather and w1 / w3 as one op, w2 and its
                        // reduce-scatter as one
        auto g13 = ops::tp::all_gather_linears(
            cc, std::move(v), {&ff.child("w1").param("weight"), &ff.child("w3").param("weight")},
            {fn + ".w1", fn + ".w3"}, tp_, fn + " all_gather(seq)");
        Value s1 = ops::silu(cc, std::move(g13[0]), fn + ".silu");
        Value p = ops::mul(cc, std::move(s1), std::move(g13[1]), fn + ".mul");
        return ops::tp::linear_reduce_scatter(cc, std::move(p), ff.child("w2").param("weight"), tp_,
                                              fn + ".w2");
      }
      v = sublayer_input(cc, std::move(v), fn);
      const Value held = v;  // as in attention: the hook's output is the call's argument
      Value g1 = project(cc, v, ff.child("w1"), nullptr, cfg, fn + ".w1");
      Value s1 = ops::silu(cc, std::move(g1), fn + ".silu");
      Value g3 = project(cc, std::move(v), ff.child("w3"), nullptr, cfg, fn + ".w3");
      Value p = ops::mul(cc, std::move(s1), std::move(g3), fn + ".mul");
      return sublayer_output(
          cc, project(cc, std::move(p), ff.child("w2"), nullptr, cfg, fn + ".w2"), fn);
    });
    return ops::add(c, std::move(h), std::move(f), n + ".residual_ffn");
  }
  Module& ln1 = b.child("ln_1");
  Value xn =
      ops::layer_norm(c, x, ln1.param("weight"), ln1.param("bias"), cfg.norm_eps, n + ".ln_1");
  Value a = c.call_module(b.child("attn"), std::move(xn), [&](ExecContext& cc, Value v) {
    return gpt2_attention(cc, b.child("attn"), std::move(v), batch, seq);
  });
  Value h = ops::add(c, std::move(x), std::move(a), n + ".residual_attn");
  Module& ln2 = b.child("ln_2");
  Value hn =
      ops::layer_norm(c, h, ln2.param("weight"), ln2.param("bias"), cfg.norm_eps, n + ".ln_2");
  Module& mlp = b.child("mlp");
  Value f = c.call_module(mlp, std::move(hn), [&](ExecContext& cc, Value v) {
    Module& fc = mlp.child("c_fc");
    v = sublayer_input(cc, std::move(v), mlp.fqn);
    const Value held = v;  // as in attention
    Value g =
        ops::linear(cc, std::move(v), fc.param("weight"), &fc.param("bias"), mlp.fqn + ".c_fc");
    g = ops::gelu(cc, std::move(g), mlp.fqn + ".gelu");
    return gpt2_projection(cc, mlp.child("c_proj"), std::move(g), mlp.fqn + ".c_proj");
  });
  return ops::add(c, std::move(h), std::move(f), n + ".residual_mlp");
}

// model.implementation compile: the block as torch.compile runs it (NOTE [Compiled block] in
// compiled_block.cc): the same module calls, GEMMs and attention, fused pointwise regions.
Value Transformer::compiled_llama_block(ExecContext& c, Module& b, Value x, int64_t batch,
                                        int64_t seq, const ops::RotaryTables* rot) {
  const std::string& n = b.fqn;
  const double eps = config_.norm_eps;
  auto xr = ops::compiled::rms_norm(c, std::move(x), b.child("attention_norm").param("weight"), eps,
                                    n + ".attention_norm");
  Value a = c.call_module(b.child("attention"), std::move(xr.y), [&](ExecContext& cc, Value v) {
    return llama_attention(cc, b.child("attention"), std::move(v), batch, seq, rot);
  });
  const Tensor xt = xr.residual.t, at = a.t;
  auto hr = ops::compiled::add_rms_norm(c, std::move(xr.residual), std::move(a),
                                        b.child("ffn_norm").param("weight"), eps, n + ".ffn_norm");
  Module& ff = b.child("feed_forward");
  Value f = c.call_module(ff, std::move(hr.y), [&](ExecContext& cc, Value v) {
    const std::string& fn = ff.fqn;
    if (tp_.async) {  // NOTE [Async TP] in async_tp.cc, as in the eager block
      auto g13 = ops::tp::all_gather_linears(
          cc, std::move(v), {&ff.child("w1").param("weight"), &ff.child("w3").param("weight")},
          {fn + ".w1", fn + ".w3"}, tp_, fn + " all_gather(seq)");
      Value p = ops::compiled::silu_mul(cc, std::move(g13[0]), std::move(g13[1]), fn + ".silu_mul");
      return ops::tp::linear_reduce_scatter(cc, std::move(p), ff.child("w2").param("weight"), tp_,
                                            fn + ".w2");
    }
    v = sublayer_input(cc, std::move(v), fn);
    const Value held = v;  // as in the eager block
    Value g1 = ops::linear(cc, v, ff.child("w1").param("weight"), nullptr, fn + ".w1");
    Value g3 = ops::linear(cc, std::move(v), ff.child("w3").param("weight"), nullptr, fn + ".w3");
    Value p = ops::compiled::silu_mul(cc, std::move(g1), std::move(g3), fn + ".silu_mul");
    return sublayer_output(
        cc, ops::linear(cc, std::move(p), ff.child("w2").param("weight"), nullptr, fn + ".w2"), fn);
  });
  return ops::compiled::residual_add(c, std::move(hr.residual), xt, at, std::move(f),
                                     n + ".residual");
}

// NOTE [Loss outside the root]: as in torchtitan (pred = model(x); loss = loss_fn(pred, labels);
// del pred), the root module returns the logits, so the root's post-forward (and its flush
// of the last all-gather buffer) runs before the loss, its pre-backward hook fires after the
// loss backward, and the bf16 logits stay alive until the loss is computed (with keep_logits,
// until backward ends: NOTE [Kept until backward ends] in autograd.h).
Value Transformer::forward(ExecContext& c, const Tensor& tokens, const Tensor& labels,
                           const std::vector<BlockCheckpoint>& block_ac) {
  const ModelImplementation& impl = config_.implementation;
  FULLSHARD_CHECK(impl.loss != LossImpl::kChunked,
                  "loss = chunked runs through chunked_loss (core/scenario)");
  Value logits = logits_forward(c, tokens, block_ac);
  // With loss parallel the vocab-sharded logits go into a vocab-parallel cross-entropy;
  // without it they are gathered (output_layouts=Replicate()).
  return loss_from_logits(c, std::move(logits), labels);
}

Value Transformer::loss_from_logits(ExecContext& c, Value logits, const Tensor& labels) {
  const ModelImplementation& impl = config_.implementation;
  if (tp_.enabled() && tp_.loss_parallel) {
    if (impl.keep_logits && c.graph()) c.graph()->keep_until_backward_ends(logits.t);
    FULLSHARD_CHECK(impl.loss == LossImpl::kFp32Logits,
                    "loss parallel needs fp32_logits (check_tensor_parallel)");
    return ops::tp::vocab_parallel_cross_entropy(c, logits, labels, tp_, "loss");
  }
  if (tp_.enabled())
    logits = ops::tp::all_gather_last_dim(c, std::move(logits), tp_, "output all_gather(vocab)");
  if (impl.keep_logits && c.graph()) c.graph()->keep_until_backward_ends(logits.t);
  return ops::cross_entropy(c, logits, labels, "loss", impl.loss != LossImpl::kBf16Logits);
}

Value Transformer::logits_forward(ExecContext& c, const Tensor& tokens,
                                  const std::vector<BlockCheckpoint>& block_ac) {
  return root_forward(c, tokens, block_ac, false);
}

Value Transformer::hidden_forward(ExecContext& c, const Tensor& tokens,
                                  const std::vector<BlockCheckpoint>& block_ac) {
  FULLSHARD_CHECK(
      config_.arch == ModelArch::kLlama && (!config_.tie_embeddings || has_output_module_),
      "hidden_forward needs a Llama (tied: with its output module)");
  return root_forward(c, tokens, block_ac, true);
}

// NOTE [Tied output module]: torchtitan's Decoder keeps lm_head as a module when the weights
// are tied (`self.tok_embeddings.weight = self.lm_head.weight`, torchtitan/models/common/
// decoder.py at pytorch/torchtitan@b5bcd76): one nn.Parameter registered under both modules,
// so fully_shard([tok_embeddings, norm, lm_head]) claims it once and both calls run through the
// group's hooks. fullshard's module tree owns a parameter in one module only, so a tied
// Llama's output module is added without parameters when its calls go through module hooks
// (fsdp.units "embed_blocks_head") and projects with the embedding's weight. The module tree
// of every other run stays as it was. A chunked loss calls the output module by itself, so a
// tied Llama with loss "chunked" has it whatever its units.
void Transformer::set_edge_module_calls(bool on) {
  edge_module_calls_ = on;
  if (on && config_.arch == ModelArch::kLlama && config_.tie_embeddings && !has_output_module_) {
    root_.add_child("output", "Linear");
    has_output_module_ = true;
  }
}

Value Transformer::output_forward(ExecContext& c, Value h) {
  Module& out = output_module();
  const Param& w =
      config_.tie_embeddings ? root_.child("tok_embeddings").param("weight") : out.param("weight");
  return c.call_module(out, std::move(h), [&w](ExecContext& cc, Value v) {
    return ops::linear(cc, std::move(v), w, nullptr, "output");
  });
}

Value Transformer::generate(ExecContext& c, const Tensor& tokens) {
  return root_forward(c, tokens, {}, false, "generate");
}

Value Transformer::root_forward(ExecContext& c, const Tensor& tokens,
                                const std::vector<BlockCheckpoint>& block_ac, bool skip_head,
                                const char* method) {
  const auto& cfg = config_;
  FULLSHARD_CHECK(tokens.shape().size() == 2, "tokens must be [B, S]");
  const int64_t batch = tokens.shape()[0], seq = tokens.shape()[1];
  auto body = [&](ExecContext& rc, Value in) {
    Value h;
    if (cfg.arch == ModelArch::kLlama) {
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
      h = ops::embedding(rc, in.t, root_.child("wte").param("weight"), "wte");
      int64_t first_position = 0;  // a sequence shard adds its own positions' rows
      if (tp_.enabled()) {
        h = ops::tp::reduce_scatter_sequence(rc, std::move(h), tp_, "wte reduce_scatter(seq)");
        first_position = static_cast<int64_t>(tp_.index) * (seq / tp_.degree);
      }
      h = ops::position_embedding(rc, std::move(h), root_.child("wpe").param("weight"), "wpe",
                                  first_position);
    }
    in = Value{};
    // HF LlamaModel.forward: position_embeddings = self.rotary_emb(hidden_states, position_ids),
    // a local until the decoder stack and the final norm are done.
    std::optional<ops::RotaryTables> rot;
    if (cfg.arch == ModelArch::kLlama && cfg.implementation.rope == RopeImpl::kRotateHalf)
      rot = ops::rotary_cos_sin(rc, batch, seq, cfg.head_dim(), rope(), h.t.dtype(), "rotary_emb");
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Module& b = *blocks_[i];
      BlockCheckpoint ac = i < block_ac.size() ? block_ac[i] : BlockCheckpoint::kNone;
      h = rc.call_module(b, std::move(h), [&](ExecContext& bc, Value x) {
        auto body = [this, &b, batch, seq, rot](ExecContext& cc, Value v) {
          return block_forward(cc, b, std::move(v), batch, seq, rot ? &*rot : nullptr);
        };
        if (ac == BlockCheckpoint::kNone) return body(bc, std::move(x));
        bool trainable = false;  // NOTE [Frozen parameters] in lora.cc
        b.for_each_param([&trainable](Param& p) { trainable = trainable || p.requires_grad; });
        return checkpoint(bc, std::move(x), body, ac == BlockCheckpoint::kOpSelective, b.fqn,
                          trainable);
      });
    }
    const Param* out_w;
    if (cfg.arch == ModelArch::kLlama) {
      Module& norm = root_.child("norm");
      if (edge_module_calls_)
        h = rc.call_module(norm, std::move(h), [this, &norm](ExecContext& nc, Value v) {
          return rms_norm(nc, std::move(v), norm.param("weight"), "norm");
        });
      else
        h = rms_norm(rc, std::move(h), norm.param("weight"), "norm");
      rot.reset();
      // Under tp the norm's sequence shards are gathered to Replicate first (NOTE [Chunked
      // loss under tp] in core/scenario/scenario_checks.cc): each chunk enters lm_head whole.
      if (skip_head)
        return tp_.enabled()
                   ? ops::tp::all_gather_sequence(rc, std::move(h), tp_, "norm all_gather(seq)")
                   : h;
      out_w = cfg.tie_embeddings ? &root_.child("tok_embeddings").param("weight")
                                 : &root_.child("output").param("weight");
      if (tp_.enabled())
        h = ops::tp::all_gather_sequence(rc, std::move(h), tp_, "output all_gather(seq)");
    } else {
      Module& lnf = root_.child("ln_f");
      h = ops::layer_norm(rc, std::move(h), lnf.param("weight"), lnf.param("bias"), cfg.norm_eps,
                          "ln_f");
      out_w = &root_.child("wte").param("weight");
      if (tp_.enabled())
        h = ops::tp::all_gather_sequence(rc, std::move(h), tp_, "lm_head all_gather(seq)");
    }
    Value logits = edge_module_calls_ && cfg.arch == ModelArch::kLlama
                       ? output_forward(rc, std::move(h))
                       : ops::linear(rc, std::move(h), *out_w, nullptr,
                                     cfg.arch == ModelArch::kLlama ? "output" : "lm_head");
    // torchtitan until mid-2024: `output = self.output(h).float()` inside the root's forward
    // (NOTE [Implementation presets], torchtitan-2024-04).
    if (cfg.implementation.loss == LossImpl::kFp32Output)
      logits = ops::to_float(rc, std::move(logits), "output");
    return logits;
  };
  if (method) return c.call_method(root_, method, Value{tokens, 0}, body);
  return c.call_module(root_, Value{tokens, 0}, body);
}

}  // namespace fullshard
