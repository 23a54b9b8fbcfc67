#pragma once
// The host program of one rank for a scenario: build the model, fully_shard it, and run
// training steps (forward, backward, gradient clipping, AdamW) against any Backend. The
// simulator and the real backends run exactly this code.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/fsdp/fully_shard.h"
#include "core/model/expert_bias.h"
#include "core/model/transformer.h"
#include "core/optim/adamw.h"
#include "core/scenario/scenario.h"

namespace fullshard {

// The mesh groups of `rank` for a scenario's FSDP mesh (1-D: shard; 2-D: replicate, shard).
MeshInfo mesh_info_for(const Scenario& s, int rank);
// This rank's tensor-parallel view (degree 1 without a tp dim).
TensorParallel tensor_parallel_for(const Scenario& s, int rank);
// This rank's expert-parallel view (expert_parallel.degree; degree 1 when none).
ExpertParallel expert_parallel_for(const Scenario& s, int rank);
// This rank's context-parallel view (degree 1 without a cp dim).
ContextParallel context_parallel_for(const Scenario& s, int rank);

// Device bytes each rank keeps outside the caching allocator for async TP's symmetric-memory
// workspace (ops::tp::symmetric_workspace_bytes for a micro-batch, in the compute
// dtype); 0 without tensor_parallel.async.
uint64_t symmetric_memory_bytes(const Scenario& s);
// How each block is checkpointed under the scenario's activation-checkpointing mode.
std::vector<BlockCheckpoint> block_checkpointing(const ActivationCheckpointing& ac,
                                                 int64_t n_layers);

// The data-parallel ranks of `rank` (torchtitan's dp_cp mesh: every mesh dim but pp and tp),
// over which the expert bias's token counts are summed (NOTE [Expert bias]).
ProcessGroup dp_cp_group(const Scenario& s, int rank);

// The AdamW of training.optimizer.
AdamWOptions adamw_options(const Scenario& s);

// The MoE layers [first, first + count) under `root` ("layers.<i>.moe") whose expert bias the
// optimizer's step pre-hook updates (NOTE [Expert bias]), each with whether block_ac recomputes
// its block; none without load_balance "expert_bias".
std::vector<ExpertBiasLayer> expert_bias_layers(const Scenario& s, Module& root, int64_t first,
                                                int64_t count,
                                                const std::vector<BlockCheckpoint>& block_ac);

// The model's parameters counted over its module tree (global shapes): all of them, those
// left trainable (training.frozen, model.lora), and the LoRA adapters among them.
struct ParameterCounts {
  int64_t total = 0, trainable = 0, adapters = 0;
};
ParameterCounts count_parameters(const Scenario& s);

class PipelineProgram;

class TrainingProgram {
 public:
  // Builds the model and applies fully_shard (this allocates the sharded parameters). With a pp
  // dim, this rank's pipeline stages instead (PipelineProgram: model(), fsdp() and optimizer()
  // are then not available).
  TrainingProgram(Backend& backend, const Scenario& scenario);
  ~TrainingProgram();

  // One optimizer step: grad_accum_steps micro-batches (gradient sync on the last only),
  // clipping, AdamW, zero_grad, and the host reading back the loss. Returns this rank's
  // loss averaged over its micro-batches (NaN on a backend without values: the simulator).
  double run_step(int step);
  // The validation loss (NOTE [Validation pass]): `batches` forward passes without autograd over
  // validation batches 0 .. batches-1 (kLoadBatch split 1), this rank's mean loss. Leaves the
  // parameters sharded as after a step. NaN on a backend without values.
  double eval_loss(int batches);
  // model.generate(prompt) under no_grad on step `step`'s first micro-batch (kLoadBatch split 0),
  // its logits dropped; the root's hooks run around it only when fsdp.forward_methods registered
  // it (NOTE [Forward methods] in core/fsdp/fully_shard.cc). Leaves the parameters sharded.
  void generate_pass(int step);

  // Called in run_step after the last micro-batch's backward (gradients reduced and sharded),
  // before clipping and the optimizer: tests read the gradients here (runner::RankOptions::
  // collect_grads). Nothing is launched or allocated by the program for it.
  void set_before_optimizer(std::function<void(int step)> f) { before_optimizer_ = std::move(f); }

  Transformer& model() { return *model_; }
  // This rank's MoE routing tape (NOTE [Recorded routing] in core/model/moe_routing_record.h),
  // its pipeline stages' with a pp dim; null for a dense model.
  RoutingTape* routing();
  FSDPRuntime& fsdp() { return *fsdp_; }
  AdamW& optimizer() { return *optim_; }
  // Parameters with requires_grad=False (training.frozen, model.lora's base), in module order:
  // the optimizer never sees them, a checkpoint still holds them. Empty with a pp dim.
  const std::vector<OptimizerParam*>& frozen_params() const { return frozen_params_; }

 private:
  Backend& b_;
  const Scenario& s_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<FSDPRuntime> fsdp_;
  std::unique_ptr<AdamW> optim_;
  std::vector<OptimizerParam*> all_params_;  // every trainable FSDPParam, in module order
  std::vector<OptimizerParam*> frozen_params_;
  // Float8 weights FSDP2 all-gathers in float8 and their shard group, when training.float8
  // precomputes their scales after each optimizer step (core/fsdp/float8_all_gather.h).
  std::vector<FSDPParam*> float8_params_;
  std::optional<ProcessGroup> float8_group_;
  std::vector<BlockCheckpoint> block_ac_;
  std::vector<ExpertBiasLayer> expert_bias_layers_;  // NOTE [Expert bias]; empty: none
  std::function<void(int)> before_optimizer_;
  std::unique_ptr<PipelineProgram> pipeline_;  // with a pp dim

  void micro_step(int step, int micro);
  // The loss gradient's seed (NOTE [Global valid tokens] in training_program.cc).
  double loss_grad_scale() const;
  // The model's forward and the loss (model.implementation.loss), as the training loop runs them.
  Value forward_loss(ExecContext& c, const Tensor& tokens, const Tensor& labels,
                     const std::vector<BlockCheckpoint>& block_ac, double grad_scale);
  std::pair<Tensor, Tensor> load_batch(int64_t step, int64_t micro, int64_t accum, int64_t split,
                                       const std::string& what);
};

}  // namespace fullshard
