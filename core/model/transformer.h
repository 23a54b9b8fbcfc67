#pragma once
// Llama-style and GPT-2-style decoders as module trees with torchtitan / nanoGPT names,
// and their forward pass over the ops in ops.h.
#include <map>
#include <optional>
#include <vector>

#include "core/model/autograd.h"
#include "core/model/context_parallel.h"
#include "core/model/ops.h"
#include "core/model/model_config.h"
#include "core/model/moe_aux_loss.h"
#include "core/model/moe_dispatch.h"
#include "core/model/tensor_parallel.h"

namespace fullshard {

// How one transformer block is checkpointed (torchtitan activation_checkpoint modes).
enum class BlockCheckpoint : uint8_t { kNone, kFull, kOpSelective };

// The modules of one pipeline stage (torchtitan's _pipeline_module_split keeps these of a whole
// model and sets the others to None): the embedding, layers [first_layer, first_layer +
// num_layers) under their own fqns, the final norm and output. Llama only.
struct ModelPart {
  bool embeddings = true;
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool head = true;  // norm + output
};

class Transformer {
 public:
  // `tp`: this rank's tensor-parallel view (parameters are built as its local shards); `ep`:
  // its expert-parallel view (the routed experts are its E / ep).
  explicit Transformer(ModelConfig config, TensorParallel tp = {}, ExpertParallel ep = {});
  // One pipeline stage's part of the model: only its modules and parameters exist (its MoE
  // layers' experts this rank's E / ep of them, as torchtitan's parallelize_fn applies
  // ExpertParallel to each model part).
  Transformer(ModelConfig config, TensorParallel tp, ModelPart part, ExpertParallel ep = {});
  const ExpertParallel& expert_parallel() const { return ep_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Context parallelism (core/model/ring_attention.h): tokens are this cp rank's shard of each
  // sequence, attention is ring attention over `cp.group`. Llama only.
  void set_context_parallel(ContextParallel cp) { cp_ = std::move(cp); }
  const ContextParallel& context_parallel() const { return cp_; }
  const ModelConfig& config() const { return config_; }
  Module& root() { return root_; }
  // The auxiliary load-balancing loss's state (NOTE [Auxiliary load-balancing loss] in
  // core/model/moe_aux_loss.h): set once the root's buffers are allocated; disabled otherwise.
  MoeAuxLoss& moe_aux_loss() { return aux_; }
  const std::vector<Module*>& blocks() const { return blocks_; }

  // tokens and labels: [B, S] int64. Returns the mean cross-entropy loss (fp32 scalar).
  // `block_ac[i]` says how block i is checkpointed (empty: none).
  Value forward(ExecContext& c, const Tensor& tokens, const Tensor& labels,
                const std::vector<BlockCheckpoint>& block_ac);
  // The loss of forward() over the logits of logits_forward (or of a last pipeline stage).
  Value loss_from_logits(ExecContext& c, Value logits, const Tensor& labels);
  // A pipeline stage's model(x) (core/model/transformer_stage.cc): the embedding of `tokens`
  // (the first stage) or `input` (the previous stage's output), the part's layers, and the norm
  // and output (the last stage: the logits) as torchtitan's Decoder.forward runs with the other
  // modules None. `block_ac` is indexed by global layer.
  Value stage_forward(ExecContext& c, const Tensor* tokens, Value input,
                      const std::vector<BlockCheckpoint>& block_ac);
  const std::optional<ModelPart>& part() const { return part_; }
  // model(tokens): the root module's forward, returning the logits [B, S, V].
  Value logits_forward(ExecContext& c, const Tensor& tokens,
                       const std::vector<BlockCheckpoint>& block_ac);
  // model(tokens) with torchtitan's `_skip_lm_head`: the final norm's output [B, S, D] (Llama).
  Value hidden_forward(ExecContext& c, const Tensor& tokens,
                       const std::vector<BlockCheckpoint>& block_ac);
  // model.generate(tokens): a method other than forward that runs the root's forward body (the
  // logits of a generation loop's prompt, no autograd), so the root's FSDP hooks run around it
  // only if it was registered (register_fsdp_forward_method; NOTE [Forward methods] in
  // core/fsdp/fully_shard.cc). Submodules are still called as modules.
  Value generate(ExecContext& c, const Tensor& tokens);
  // self.output(h): the output projection called as a module (its FSDP hooks run), for a
  // chunked loss's standalone calls on [T, D] chunks of the hidden states.
  Value output_forward(ExecContext& c, Value h);
  Module& output_module() { return root_.child("output"); }
  // Run tok_embeddings, norm and output through their module hooks (they are FSDP units of
  // their own: fsdp.units "embed_blocks_head"). Off, they run as plain ops inside the root's
  // forward, with the same ops and lifetimes as before the option existed. For a tied Llama,
  // on adds the output module (NOTE [Tied output module] in transformer.cc).
  void set_edge_module_calls(bool on);

 private:
  ModelConfig config_;
  TensorParallel tp_;
  ExpertParallel ep_;
  ContextParallel cp_;
  // Each MoE layer's ExpertParallel.permuted_indices (NOTE [Expert-parallel dispatch]).
  std::map<const Module*, Tensor> ep_permuted_indices_;
  MoeAuxLoss aux_;
  Module root_;
  std::vector<Module*> blocks_;
  Param* output_weight_ = nullptr;  // the embedding's weight when tied
  bool edge_module_calls_ = false;
  bool has_output_module_ = false;  // a tied Llama's parameterless output module was added
  std::optional<ModelPart> part_;   // a pipeline stage's modules (none: the whole model)

  void build();  // the module tree (of part_ when set), init and tensor parallelism
  // The config's RoPE frequencies at this rank's positions (its cp shard's, with cp).
  RopeParams rope() const {
    RopeParams r = config_.rope();
    r.cp = cp_.degree;
    r.cp_index = cp_.index;
    return r;
  }
  // `method`: the root's body runs as that method (ExecContext::call_method), not forward.
  Value root_forward(ExecContext& c, const Tensor& tokens,
                     const std::vector<BlockCheckpoint>& block_ac, bool skip_head,
                     const char* method = nullptr);

  // rot: HF's shared cos / sin (rope = rotate_half), else null.
  Value block_forward(ExecContext& c, Module& block, Value x, int64_t batch, int64_t seq,
                      const ops::RotaryTables* rot);
  Value llama_attention(ExecContext& c, Module& m, Value x, int64_t batch, int64_t seq,
                        const ops::RotaryTables* rot);
  // model.implementation compile (core/model/compiled_block.h).
  Value compiled_llama_block(ExecContext& c, Module& block, Value x, int64_t batch, int64_t seq,
                             const ops::RotaryTables* rot);
  // The attention / feed-forward module's body: the sequence all-gather first and the
  // reduce-scatter of the output last when tensor parallel.
  Value sublayer_input(ExecContext& c, Value x, const std::string& name);
  Value sublayer_output(ExecContext& c, Value y, const std::string& name);
  Value gpt2_attention(ExecContext& c, Module& m, Value x, int64_t batch, int64_t seq);
  // c_proj of attn / mlp: a linear, or RowwiseParallel's and the reduce-scatter when tp.
  Value gpt2_projection(ExecContext& c, Module& proj, Value x, const std::string& name);
  // Qwen3's per-head RMSNorm of q or k ([B, S, heads * head_dim]).
  Value head_norm(ExecContext& c, Value x, const Param& weight, int64_t heads,
                  const std::string& name);
  // The RMSNorm of model.implementation.rms_norm (fused or eager).
  Value rms_norm(ExecContext& c, Value x, const Param& weight, const std::string& name);
};

}  // namespace fullshard
