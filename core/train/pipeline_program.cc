#include "core/train/pipeline_program.h"

#include <fmt/format.h>

#include <limits>

#include "core/common/error.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/runtime/layer_args.h"
#include "core/train/apply_fsdp.h"
#include "core/train/training_program.h"

namespace fullshard {

namespace {
ProcessGroup pp_group_of(const Scenario& s, int rank) {
  const MeshInfo m = mesh_info_for(s, rank);
  FULLSHARD_CHECK(m.pp_group.has_value(), "a pipeline program needs a pp dim");
  return *m.pp_group;
}
}  // namespace

std::vector<ProcessGroup> pipeline_p2p_groups(const Scenario& s, int rank) {
  std::vector<ProcessGroup> out;
  if (!s.pipeline.enabled()) return out;
  const ProcessGroup pp = pp_group_of(s, rank);
  const PipelineScheduleOptions o = s.pipeline.schedule_options();
  const int n = o.num_stages();
  auto at = [&](int stage) { return pp.ranks[static_cast<size_t>(pipeline_stage_rank(o, stage))]; };
  // NOTE [Same-rank stage handoff]: no channel between two stages of one rank.
  for (int k : pipeline_rank_stages(o, pp.index_of(rank))) {
    if (k > 0 && at(k - 1) != at(k)) {
      out.push_back(pipeline_channel('F', k - 1, k, at(k - 1), at(k)));
      out.push_back(pipeline_channel('B', k, k - 1, at(k), at(k - 1)));
    }
    if (k + 1 < n && at(k) != at(k + 1)) {
      out.push_back(pipeline_channel('F', k, k + 1, at(k), at(k + 1)));
      out.push_back(pipeline_channel('B', k + 1, k, at(k + 1), at(k)));
    }
  }
  return out;
}

PipelineProgram::~PipelineProgram() = default;

// NOTE [MoE in pipeline stages]: torchtitan's pipeline_llm (torchtitan/distributed/
// pipeline_parallel.py at pytorch/torchtitan@02ef790c) runs the model's parallelize_fn on each
// model part (deepseek_v3's parallelize_deepseekv3 at @018740b7, qwen3's at @057fedda):
// ExpertParallel on the part's MoE layers over the ep mesh, their experts fully_shard-ed over
// efsdp, the rest over the dp mesh. Its sparse mesh (pp, dp_replicate, efsdp, ep) keeps pp
// outermost, so a stage's experts split over the ep ranks of its own pp index and each
// microbatch's forward dispatches that microbatch's tokens: the expert load, and with "routed"
// receive buffers the memory, differ per microbatch. A rank keeps one RoutingTape for all its
// stages. The schedule's actions are the same host program in a real run and in the simulator,
// so a rank's k-th MoE call is the same (stage, microbatch, layer, forward or recompute) in
// both, and ep peers share a pp index, hence the same stages in the same order: their k-th
// calls are one call, whose histograms the replay of a dispatch reads (NOTE [Recorded routing]
// in core/model/moe_routing_record.h); a record made in another order (moe_call_order) is
// refused. DualPipeV's OVERLAP_F_B runs F then B, as torchtitan since @fe80b63c: the
// two-thread overlap callback it registered before (dual_pipe_v.py) is not modelled.

PipelineProgram::PipelineProgram(Backend& b, const Scenario& s)
    : b_(b),
      s_(s),
      pp_group_(pp_group_of(s, b.rank())),
      sends_(b, s.pipeline.schedule == PipelineScheduleKind::k1F1B) {
  pp_rank_ = pp_group_.index_of(b.rank());
  const PipelineScheduleOptions o = s.pipeline.schedule_options();
  const PipelineOrder order = build_pipeline_order(o);
  actions_ = order[static_cast<size_t>(pp_rank_)];
  // _PipelineScheduleRuntime's list (NOTE [Lowered send and recv order] in
  // core/pipeline/pipeline_lowering.h); GPipe and 1F1B run their own _step_microbatches, which
  // receives right before the action that reads it.
  lowered_ = !is_single_stage_schedule(o.kind);
  if (lowered_) lowered_actions_ = lower_pipeline_order(o, order)[static_cast<size_t>(pp_rank_)];
  const int n = o.num_stages();
  // NOTE [MoE in pipeline stages] (above).
  const ExpertParallel ep = expert_parallel_for(s, b.rank());
  routing_ = ep.routing;
  for (int k : pipeline_rank_stages(o, pp_rank_)) {
    auto st = std::make_unique<Stage>();
    st->index = k;
    st->first = k == 0;
    st->last = k == n - 1;
    const PipelineStageModules& m = s.pipeline.stages[static_cast<size_t>(k)];
    ModelPart part{m.embeddings, m.first_layer, m.num_layers, m.output};
    st->model = std::make_unique<Transformer>(s.model, tensor_parallel_for(s, b.rank()), part, ep);
    st->model->set_context_parallel(context_parallel_for(s, b.rank()));
    set_init_seed(st->model->root(), s.training.seed);
    st->fsdp = std::make_unique<FSDPRuntime>(b, mesh_info_for(s, b.rank()));
    apply_fsdp(s, *st->model, *st->fsdp, true);
    std::vector<OptimizerParam*> params;
    for (auto& state : st->fsdp->states())
      if (state->group)
        for (FSDPParam* p : state->group->fsdp_params()) params.push_back(p);
    all_params_.insert(all_params_.end(), params.begin(), params.end());
    // torchtitan's OptimizersContainer: one optimizer per model part.
    st->optim = std::make_unique<AdamW>(b, params, adamw_options(s));
    st->model->root().for_each_param([&](Param& p) { st->param_order.push_back(&p); });
    st->prev_local = k > 0 && pipeline_stage_rank(o, k - 1) == pp_rank_;
    st->next_local = k + 1 < n && pipeline_stage_rank(o, k + 1) == pp_rank_;
    by_index_[k] = st.get();
    stages_.push_back(std::move(st));
  }
  block_ac_ = block_checkpointing(s.training.activation_checkpointing, s.model.n_layers);
  // MoE's buffers, whole on every rank, and the layers the step pre-hook updates: every model
  // part's, as torchtitan's hook walks model_parts (NOTE [Expert bias] in expert_bias.h).
  for (auto& st : stages_) {
    allocate_buffers(b, st->model->root());
    const PipelineStageModules& m = s.pipeline.stages[static_cast<size_t>(st->index)];
    for (const ExpertBiasLayer& l :
         expert_bias_layers(s, st->model->root(), m.first_layer, m.num_layers, block_ac_))
      expert_bias_layers_.push_back(l);
  }
}

int PipelineProgram::rank_of_stage(int stage) const {
  return pp_group_
      .ranks[static_cast<size_t>(pipeline_stage_rank(s_.pipeline.schedule_options(), stage))];
}

TensorMeta PipelineProgram::activation_meta() const {
  const MixedPrecisionPolicy mp = s_.fsdp.mixed_precision_for("root");
  const DType dt = mp.output_dtype.value_or(mp.param_dtype.value_or(s_.training.orig_dtype));
  const int64_t tp = s_.fsdp.mesh_size("tp"), cp = s_.fsdp.mesh_size("cp");
  return {dt, {s_.pipeline.microbatch_size, s_.training.seq_len / (cp * tp), s_.model.dim}};
}

// torchtitan's train_step with pp (pytorch/torchtitan@b5bcd76c6, trainer.py): every rank draws
// the step's microbatches from its data loader, one batch of microbatch_size sequences each.
void PipelineProgram::load_microbatches(int step) {
  tokens_.clear();
  labels_.clear();
  const int m = s_.pipeline.microbatches;
  const MeshInfo mi = mesh_info_for(s_, b_.rank());
  const ContextParallel cp = context_parallel_for(s_, b_.rank());  // this rank's shard of each
  const TensorMeta ids{DType::kInt64,
                       {s_.pipeline.microbatch_size, s_.training.seq_len / cp.degree}};
  for (int i = 0; i < m; ++i) {
    Tensor tokens = empty_tensor(b_, ids, MemCategory::kActivation, StreamRole::kDefault,
                                  fmt::format("input tokens {}", i));
    Tensor labels = empty_tensor(b_, ids, MemCategory::kActivation, StreamRole::kDefault,
                                  fmt::format("labels {}", i));
    OpCall load;
    load.kind = OpKind::kLoadBatch;
    load.name = fmt::format("load batch {}", i);
    load.outputs = {tokens.ref(), labels.ref()};
    load.bytes = static_cast<double>(2 * ids.nbytes());
    LoadBatchArgs a;  // core/runtime/layer_args.h
    a.step = step;
    a.micro_batch = i;
    a.accumulation = m;
    a.split = 0;
    a.dp_rank = mi.dp_rank;
    a.dp_size = mi.dp_size;
    a.cp = cp.degree;
    a.cp_index = cp.index;
    a.encode(load);
    b_.launch(StreamRole::kDefault, load);
    tokens_.push_back(std::move(tokens));
    labels_.push_back(std::move(labels));
  }
}

void PipelineProgram::forward(Stage& st, int mb) {
  InFlight f;
  f.graph = std::make_unique<Graph>();
  ExecContext c(b_, f.graph.get(), st.fsdp.get());
  Value input;
  if (!st.first) {  // forward_one_chunk: the received activation is the stage's input (a leaf)
    const Tensor& buf = st.act_recv[static_cast<size_t>(mb)];
    if (!st.prev_local) receive(st, 'F', mb, buf);
    input = Value{buf, c.new_id()};
    f.input = input;
  }
  Value out = st.model->stage_forward(c, st.first ? &tokens_[static_cast<size_t>(mb)] : nullptr,
                                      std::move(input), block_ac_);
  if (st.last) {  // the schedule's _maybe_compute_loss
    f.loss = st.model->loss_from_logits(c, out, labels_[static_cast<size_t>(mb)]);
    b_.read_scalar(StreamRole::kDefault, f.loss.t.ref());
  } else {
    const TensorMeta want = activation_meta();
    FULLSHARD_CHECK(out.t.dtype() == want.dtype && out.t.shape() == want.shape,
                    "stage " + std::to_string(st.index) +
                        "'s output differs from the receive "
                        "buffer the next stage allocated");
    if (st.next_local)  // set_local_fwd_input: the output itself becomes the next's input
      by_index_.at(st.index + 1)->act_recv[static_cast<size_t>(mb)] = out.t;
    else
      send(st, 'F', mb, out.t);
  }
  f.output = std::move(out);
  st.in_flight.emplace(mb, std::move(f));
}

// backward_maybe_with_nosync: every microbatch's backward (B, I or W) keeps its gradients
// unsharded; the reduction waits for the stage's last one.
void PipelineProgram::no_sync(Stage& st) {
  st.fsdp->set_is_last_backward(false);
  st.fsdp->set_reshard_after_backward(false);
  st.fsdp->set_requires_gradient_sync(false);
}

// The backward's root and its gradient: ones_like(loss) scaled on the last stage, else the
// received gradient of the stage's output (received here unless the next stage is local).
std::pair<uint64_t, Tensor> PipelineProgram::backward_seed(Stage& st, InFlight& f, int mb) {
  if (st.last) {  // torch.autograd.backward(loss): the seed is ones_like(loss)
    Tensor seed = empty_tensor(b_, f.loss.t.meta(), MemCategory::kTemporary,
                                StreamRole::kDefault, "loss grad seed");
    OpCall fill;
    fill.kind = OpKind::kFill;
    fill.name = "ones_like(loss)";
    fill.outputs = {seed.ref()};
    // torchtitan builds the schedule with scale_grads=False and loss_fn
    // rescale_accumulated_loss(loss_fn, n_microbatches): each microbatch's loss is divided by
    // the microbatch count, so the gradient seed of the loss this program reads is 1 / m (the
    // gradient of the mean over the microbatches, as grad_accum_steps gives without pp).
    fill.fargs = {1.0 / static_cast<double>(s_.pipeline.microbatches)};
    b_.launch(StreamRole::kDefault, fill);
    return {f.loss.id, std::move(seed)};
  }
  Tensor seed = st.grad_recv[static_cast<size_t>(mb)];
  if (!st.next_local) receive(st, 'B', mb, seed);
  return {f.output.id, std::move(seed)};
}

// The stage input's gradient to the previous stage: a send, or on the same rank
// set_local_bwd_input (the tensor becomes the previous stage's gradient buffer).
void PipelineProgram::pass_input_grad(Stage& st, Tensor input_grad, int mb) {
  if (st.first) return;
  if (st.prev_local) {
    by_index_.at(st.index - 1)->grad_recv[static_cast<size_t>(mb)] = std::move(input_grad);
    return;
  }
  send(st, 'B', mb, input_grad);
}

// The channel `st` sends on (its output forward, its input gradient back) or receives on.
ProcessGroup PipelineProgram::channel_of(const Stage& st, char kind, bool sends) const {
  const int peer = (kind == 'F') == sends ? st.index + 1 : st.index - 1;
  const int from = sends ? st.index : peer, to = sends ? peer : st.index;
  return pipeline_channel(kind, from, to, rank_of_stage(from), rank_of_stage(to));
}

void PipelineProgram::receive(Stage& st, char kind, int mb, const Tensor& buffer) {
  if (!lowered_) {
    pipeline_recv(b_, buffer, channel_of(st, kind, false), mb);
    return;
  }
  auto node = posted_recvs_.extract(TransferKey{st.index, kind, mb});
  FULLSHARD_CHECK(!node.empty(), fmt::format("stage {} reads microbatch {}'s {} before its RECV",
                                             st.index, mb, kind == 'F' ? "input" : "gradient"));
  b_.wait_event(StreamRole::kDefault, node.mapped());  // _wait_batch_p2p(recv ops)
}

void PipelineProgram::send(Stage& st, char kind, int mb, const Tensor& t) {
  if (lowered_)
    unsent_.emplace(TransferKey{st.index, kind, mb}, t);
  else
    sends_.send(stream_of(st, kind, true), t, channel_of(st, kind, true), mb);
}

StreamRole PipelineProgram::stream_of(const Stage& st, char kind, bool sends) const {
  const int peer = (kind == 'F') == sends ? st.index + 1 : st.index - 1;
  return pipeline_p2p_stream(pp_rank_, pipeline_stage_rank(s_.pipeline.schedule_options(), peer),
                             pp_group_.size());
}

// The lowered schedule's REDUCE_GRAD after the stage's last B or W (_add_reduce_grad).
// (The lowered list carries that action itself.)
void PipelineProgram::count_backward(Stage& st) {
  if (++st.backwards == s_.pipeline.microbatches && !lowered_) st.fsdp->perform_reduce_grad();
}

void PipelineProgram::backward(Stage& st, int mb) {
  auto node = st.in_flight.extract(mb);
  FULLSHARD_CHECK(!node.empty(), "a backward before its forward");
  InFlight f = std::move(node.mapped());
  no_sync(st);
  auto [root, seed] = backward_seed(st, f, mb);
  f.loss = Value{};
  const uint64_t want = st.first ? 0 : f.input.id;
  Tensor input_grad = f.graph->backward(b_, root, std::move(seed), want);
  st.fsdp->post_backward_final_callback();  // queued by the root's pre-backward hook
  f = InFlight{};                           // the stage's output and graph go
  pass_input_grad(st, std::move(input_grad), mb);
  count_backward(st);
}

// NOTE [I and W in the program]: backward_one_chunk(full_backward=False) pops the forward cache
// and keeps (input, param groups, stage output, output gradients) in backward_state until
// backward_weight_one_chunk. On the first stage, whose input needs no gradient, I computes
// nothing and W runs the whole backward (stage.py); elsewhere I is stage_backward_input (the
// input gradient, sent on at once) and W stage_backward_weight (NOTE [Split backward] in
// core/model/autograd.h). So the stage output (the loss on the last stage) and the graph, with
// what it saved (of a checkpointed block its input only, NOTE [Split backward of a checkpointed
// block] in core/model/autograd.cc) and the intermediates' output gradients, live from I to W;
// the logits and the loss's own nodes go at I. Both run under the no-sync flags, each followed by
// the root's final callback; the stage's gradients are reduced after its last W.
void PipelineProgram::backward_input(Stage& st, int mb) {
  auto node = st.in_flight.extract(mb);
  FULLSHARD_CHECK(!node.empty(), "an input backward before its forward");
  InFlight f = std::move(node.mapped());
  no_sync(st);
  auto [root, seed] = backward_seed(st, f, mb);
  Pending w;
  w.graph = std::move(f.graph);
  w.root = root;
  w.output = std::move(f.output);
  if (st.first) {
    w.seed = std::move(seed);  // the whole backward waits for W
  } else {
    w.loss = std::move(f.loss);
    Tensor input_grad = w.graph->backward_input(b_, root, std::move(seed), f.input.id);
    st.fsdp->post_backward_final_callback();
    if (st.last) w.output = Value{};  // the logits: only the detached loss stays
    pass_input_grad(st, std::move(input_grad), mb);
  }
  f = InFlight{};
  st.awaiting_weight.emplace(mb, std::move(w));
}

void PipelineProgram::backward_weight(Stage& st, int mb) {
  auto node = st.awaiting_weight.extract(mb);
  FULLSHARD_CHECK(!node.empty(), "a weight backward before its input backward");
  Pending w = std::move(node.mapped());
  no_sync(st);
  if (st.first)
    w.graph->backward(b_, w.root, std::move(w.seed), 0);
  else
    w.graph->backward_weight(b_, st.param_order);
  st.fsdp->post_backward_final_callback();
  w = Pending{};
  count_backward(st);
}

void PipelineProgram::run_compute(const PipelineAction& a) {
  Stage& st = *by_index_.at(a.stage);
  b_.annotate(fmt::format("{}{}{}", a.stage, pipeline_op_letter(a.op), a.microbatch));
  switch (a.op) {
    case PipelineOp::kForward: forward(st, a.microbatch); break;
    case PipelineOp::kFullBackward: backward(st, a.microbatch); break;
    case PipelineOp::kBackwardInput: backward_input(st, a.microbatch); break;
    case PipelineOp::kBackwardWeight: backward_weight(st, a.microbatch); break;
  }
}

// One action of _PipelineScheduleRuntime's lowered list. DualPipeV's OVERLAP_F_B pairs run one
// after the other, as PyTorch's runtime runs them without a registered overlap function; a SEND
// leaves on the p2p stream (waited at the step's end), a RECV is posted there and waited by the
// action that reads it; REDUCE_GRAD is perform_reduce_grad. UNSHARD / RESHARD: FSDP2's hooks.
void PipelineProgram::run_lowered(const LoweredAction& a) {
  switch (a.kind) {
    case LoweredKind::kCompute:
      for (const PipelineAction& c : a.compute) run_compute(c);
      return;
    case LoweredKind::kSendF:
    case LoweredKind::kSendB: {
      const char kind = a.kind == LoweredKind::kSendF ? 'F' : 'B';
      auto node = unsent_.extract(TransferKey{a.stage, kind, a.microbatch});
      FULLSHARD_CHECK(!node.empty(), "a SEND before the action that makes its tensor");
      const Stage& st = *by_index_.at(a.stage);
      sends_.send(stream_of(st, kind, true), node.mapped(), channel_of(st, kind, true),
                  a.microbatch);
      return;
    }
    case LoweredKind::kRecvF:
    case LoweredKind::kRecvB: {
      const char kind = a.kind == LoweredKind::kRecvF ? 'F' : 'B';
      Stage& st = *by_index_.at(a.stage);
      const Tensor& buf = (kind == 'F' ? st.act_recv : st.grad_recv)[static_cast<size_t>(a.microbatch)];
      b_.annotate(fmt::format("{}{}{}", a.stage, lowered_kind_name(a.kind), a.microbatch));
      const bool fresh =
          posted_recvs_
              .emplace(TransferKey{a.stage, kind, a.microbatch},
                       pipeline_post_recv(b_, stream_of(st, kind, false), buf,
                                          channel_of(st, kind, false), a.microbatch))
              .second;
      FULLSHARD_CHECK(fresh, "a second RECV before the action that reads the first");
      return;
    }
    case LoweredKind::kReduceGrad: by_index_.at(a.stage)->fsdp->perform_reduce_grad(); return;
    case LoweredKind::kUnshard:
    case LoweredKind::kReshard: return;
  }
}

double PipelineProgram::run_step(int step) {
  b_.set_step(step);
  const int m = s_.pipeline.microbatches;
  if (!initialized_) {  // _initialize_stage: every microbatch's receive buffers, kept
    initialized_ = true;
    const TensorMeta meta = activation_meta();
    for (auto& st : stages_)
      for (int i = 0; i < m; ++i) {
        if (!st->first)
          st->act_recv.push_back(empty_tensor(
              b_, meta, MemCategory::kActivation, StreamRole::kDefault,
              fmt::format("recv_for_{}_from_{} microbatch {}", st->index, st->index - 1, i)));
        if (!st->last)
          st->grad_recv.push_back(empty_tensor(
              b_, meta, MemCategory::kActivation, StreamRole::kDefault,
              fmt::format("recv_grad_for_{}_from_{} microbatch {}", st->index, st->index + 1, i)));
      }
  }
  b_.annotate("forward");
  load_microbatches(step);
  for (auto& st : stages_) st->backwards = 0;
  if (lowered_)
    for (const LoweredAction& a : lowered_actions_) run_lowered(a);
  else
    for (const PipelineAction& a : actions_) run_compute(a);
  for (auto& st : stages_) {  // every F has its B, every I its W, every stage reduced
    FULLSHARD_CHECK(st->in_flight.empty() && st->awaiting_weight.empty(),
                    "stage " + std::to_string(st->index) + " ends the step with a microbatch " +
                        (st->in_flight.empty() ? "awaiting its W" : "in flight"));
    FULLSHARD_CHECK(st->backwards == m, "stage " + std::to_string(st->index) +
                                            " ends the step without its last backward");
  }
  FULLSHARD_CHECK(unsent_.empty() && posted_recvs_.empty(),
                  "the step ends with a transfer made but not sent, or received but not read");
  sends_.wait_all();
  tokens_.clear();
  labels_.clear();
  b_.annotate("optimizer");
  if (s_.training.optimizer.max_grad_norm > 0)
    clip_grad_norm(b_, all_params_, s_.training.optimizer.max_grad_norm,
                   mesh_info_for(s_, b_.rank()));
  // The OptimizersContainer's step pre-hook (NOTE [Expert bias]): once, over every stage.
  update_expert_bias(b_, expert_bias_layers_, s_.model.moe.load_balance_coeff,
                     dp_cp_group(s_, b_.rank()));
  for (auto& st : stages_) st->optim->step();
  if (s_.fsdp.post_optim_event) {  // each stage's root (NOTE [Post-optimizer event])
    const EventId e = b_.record_event(StreamRole::kDefault);
    for (auto& st : stages_) st->fsdp->set_post_optim_event(e);
  }
  for (auto& st : stages_) st->optim->zero_grad();
  b_.synchronize(b_.record_event(StreamRole::kDefault));
  b_.annotate("step end");
  std::vector<double> losses = b_.take_scalars();
  if (losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (double l : losses) sum += l;
  return sum / static_cast<double>(losses.size());
}

}  // namespace fullshard
