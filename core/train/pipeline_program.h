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
// (_prepare_forward_infra / _prepare_backward_infra); transfers: NOTE [Pipeline p2p]. The
// multi-stage schedules run the lowered list (core/pipeline/pipeline_lowering.h) as
// _PipelineScheduleRuntime does: sends, recvs and REDUCE_GRAD where it puts them (UNSHARD and
// RESHARD are left to FSDP2's own hooks, which unshard at the first forward and keep it).
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "core/fsdp/fully_shard.h"
#include "core/model/transformer.h"
#include "core/model/expert_bias.h"
#include "core/optim/adamw.h"
#include "core/pipeline/pipeline_action.h"
#include "core/pipeline/pipeline_lowering.h"
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
  // The rank's MoE routing, recorded (a backend with data) or replayed (the simulator) across
  // its stages in call order (NOTE [MoE in pipeline stages] in pipeline_program.cc); null for a
  // dense model.
  RoutingTape* routing() const { return routing_.get(); }

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
    // The V schedules' neighbouring stage on this rank (NOTE [Same-rank stage handoff] in
    // pipeline_program.cc).
    bool prev_local = false, next_local = false;
    int backwards = 0;  // this step's B and W
  };

  Backend& b_;
  const Scenario& s_;
  ProcessGroup pp_group_;
  int pp_rank_ = 0;
  std::vector<PipelineAction> actions_;  // this rank's, in order
  // The multi-stage schedules: this rank's lowered list, the tensors made but not yet at their
  // SEND, and the recvs posted but not yet read, by (stage, 'F' or 'B', microbatch).
  bool lowered_ = false;
  std::vector<LoweredAction> lowered_actions_;
  using TransferKey = std::tuple<int, char, int>;
  std::map<TransferKey, Tensor> unsent_;
  std::map<TransferKey, uint64_t> posted_recvs_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::map<int, Stage*> by_index_;
  std::vector<OptimizerParam*> all_params_;
  std::vector<BlockCheckpoint> block_ac_;
  // This rank's stages' MoE layers with the expert bias, in stage order (NOTE [Expert bias] in
  // core/model/expert_bias.h); empty: none.
  std::vector<ExpertBiasLayer> expert_bias_layers_;
  PipelineSends sends_;
  std::vector<Tensor> tokens_, labels_;  // this step's microbatches
  bool initialized_ = false;
  std::shared_ptr<RoutingTape> routing_;

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
  void run_compute(const PipelineAction& a);
  void run_lowered(const LoweredAction& a);
  // The input ('F') or output gradient ('B') of `st`'s microbatch `mb` from its peer rank:
  // received now, or the posted recv waited for.
  void receive(Stage& st, char kind, int mb, const Tensor& buffer);
  // `st`'s output ('F') or input gradient ('B') to its peer rank: sent now, or at its SEND.
  void send(Stage& st, char kind, int mb, const Tensor& t);
  ProcessGroup channel_of(const Stage& st, char kind, bool sends) const;
  StreamRole stream_of(const Stage& st, char kind, bool sends) const;  // the peer's p2p stream
};

}  // namespace fullshard
