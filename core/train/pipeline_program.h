#pragma once
// One pp rank's training program with pipeline parallelism (TrainingProgram runs it when the
// scenario has a pp dim): torchtitan's pipeline_llm (pytorch/torchtitan@b5bcd76c6) over
// torch.distributed.pipelining's PipelineStage and schedules (PyTorch 2.11).
//
// NOTE [Pipeline stages in the program]: the rank builds only its stages' modules
// (Transformer's ModelPart: the first stage the embedding, the last the norm, output and loss),
// applies FSDP2 to each as torchtitan's apply_fsdp does (reshard_after_forward False by default
// with pp on), and runs its actions of the schedule's order (core/pipeline/) over microbatches.
// A microbatch's forward records its own autograd Graph, kept with the stage's output in an
// in-flight entry (PipelineStage.fwd_cache) until that microbatch's backward, so a rank holds
// the saved activations of every microbatch in flight (the count
// peak_in_flight_microbatches gives). Every backward runs with gradient sync, reshard after
// backward and is_last_backward off (backward_maybe_with_nosync), so gradients accumulate
// unsharded; after a stage's last microbatch, perform_reduce_grad reduce-scatters them. The
// receive buffers of every microbatch are allocated at the first step and kept
// (_prepare_forward_infra / _prepare_backward_infra); transfers: NOTE [Pipeline p2p].
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/fsdp/fully_shard.h"
#include "core/model/transformer.h"
#include "core/optim/adamw.h"
#include "core/pipeline/pipeline_action.h"
#include "core/scenario/scenario.h"
#include "core/train/pipeline_p2p.h"

namespace fullshard {

// Every point-to-point channel `rank` sends or receives on, in its stages' order (the simulator
// maps one rank's channels to another's of the same stages).
std::vector<ProcessGroup> pipeline_p2p_groups(const Scenario& s, int rank);

class PipelineProgram {
 public:
  // Builds this rank's stages and applies fully_shard to each.
  PipelineProgram(Backend& backend, const Scenario& scenario);
  ~PipelineProgram();
  // One optimizer step: the schedule's actions over every microbatch, the gradient reduction of
  // each stage after its last backward, clipping over every stage (and the pp group), AdamW.
  // Returns the mean loss of the last stage's microbatches (NaN elsewhere and in the simulator).
  double run_step(int step);

 private:
  struct InFlight {  // PipelineStage.fwd_cache[microbatch]
    std::unique_ptr<Graph> graph;
    Value input;   // the receive buffer as the stage's input (not on the first stage)
    Value output;  // the stage's output (the logits on the last stage)
    Value loss;    // the last stage's loss
  };
  struct Pending {  // PipelineStage.backward_state[microbatch], from I to W
    std::unique_ptr<Graph> graph;
    uint64_t root = 0;
    Tensor seed;   // the first stage's: its whole backward runs at W
    Value output;  // the stage's output (not the last stage's logits)
    Value loss;    // the last stage's, detached
  };
  struct Stage {
    int index = 0;
    bool first = false, last = false;
    std::unique_ptr<Transformer> model;
    std::unique_ptr<FSDPRuntime> fsdp;
    std::unique_ptr<AdamW> optim;
    std::vector<Tensor> act_recv, grad_recv;  // per microbatch, from the first step on
    std::map<int, InFlight> in_flight;
    std::map<int, Pending> awaiting_weight;
    std::vector<const Param*> param_order;  // the stage's parameters() order
    // NOTE [Same-rank stage handoff]: the V schedules' neighbouring stage on this rank.
    bool prev_local = false, next_local = false;
    int backwards = 0;  // this step's B and W
  };

  Backend& b_;
  const Scenario& s_;
  ProcessGroup pp_group_;
  int pp_rank_ = 0;
  std::vector<PipelineAction> actions_;  // this rank's, in order
  std::vector<std::unique_ptr<Stage>> stages_;
  std::map<int, Stage*> by_index_;
  std::vector<OptimizerParam*> all_params_;
  std::vector<BlockCheckpoint> block_ac_;
  PipelineSends sends_;
  std::vector<Tensor> tokens_, labels_;  // this step's microbatches
  bool initialized_ = false;

  int rank_of_stage(int stage) const;
  TensorMeta activation_meta() const;  // a stage boundary's tensor, [mbs, S / tp, D]
  void load_microbatches(int step);
  void forward(Stage& st, int mb);
  void backward(Stage& st, int mb);
  void backward_input(Stage& st, int mb);
  void backward_weight(Stage& st, int mb);
  void no_sync(Stage& st);
  std::pair<uint64_t, Tensor> backward_seed(Stage& st, InFlight& f, int mb);
  void pass_input_grad(Stage& st, Tensor input_grad, int mb);
  void count_backward(Stage& st);
};

}  // namespace fullshard
