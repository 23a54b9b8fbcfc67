#include "core/train/training_program.h"

#include "core/common/error.h"
#include "core/mesh/expert_mesh.h"
#include "core/fsdp/float8_all_gather.h"
#include "core/model/async_tp.h"
#include "core/model/float8_linear.h"
#include "core/model/lora.h"
#include "core/runtime/layer_args.h"
#include "core/scenario/lora_checks.h"
#include "core/scenario/recompute.h"
#include "core/train/apply_fsdp.h"
#include "core/train/model_init.h"
#include "core/train/chunked_loss.h"
#include "core/runtime/copy_args.h"
#include "core/train/pipeline_program.h"

#include <limits>

namespace fullshard {

MeshInfo mesh_info_for(const Scenario& s, int rank) {
  DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  int shard = mesh.dim_index("shard");
  if (shard < 0) shard = mesh.ndim() - 1;
  MeshInfo info;
  // With a cp dim FSDP shards over the flattened (shard, cp) group, torchtitan's dp_shard_cp
  // ("fsdp") mesh: group rank shard_index x cp + cp_index (NOTE [Mesh dims] in scenario_fsdp.cc).
  // A cp dim of size 1 is no context parallelism: the groups (and their names) stay FSDP's own.
  int cp = mesh.dim_index("cp");
  if (cp >= 0 && mesh.shape()[static_cast<size_t>(cp)] == 1) cp = -1;
  info.shard_group = cp >= 0 ? mesh.group(rank, {shard, cp}, "shard+cp") : mesh.group(rank, shard);
  if (cp >= 0) info.cp_group = mesh.group(rank, cp);
  int rep = mesh.dim_index("replicate");
  if (rep >= 0 && rep != shard) info.replicate_group = mesh.group(rank, rep);
  const int tp = mesh.dim_index("tp");
  if (tp >= 0) {
    info.tp_group = mesh.group(rank, tp);
    info.shard_tp_group = cp >= 0 ? mesh.group(rank, {shard, cp, tp}, "shard+cp+tp")
                                  : mesh.group(rank, {shard, tp}, "shard+tp");
  }
  const int pp = mesh.dim_index("pp");
  if (pp >= 0) info.pp_group = mesh.group(rank, pp);
  if (s.expert_parallel.degree > 1) {  // NOTE [Expert-parallel mesh]
    ExpertGroups g = expert_groups(info.shard_group, rank, s.expert_parallel.degree);
    info.ep_group = std::move(g.ep);
    info.efsdp_group = std::move(g.efsdp);
  }
  // The data-parallel index runs over the mesh without its pp, cp and tp dims, row-major (the
  // stages of one pipeline read the same batch; the ranks of a cp group, its shards).
  const std::vector<int> c = mesh.coordinates(rank);
  info.dp_rank = 0;
  info.dp_size = 1;
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (d == tp || d == pp || d == cp) continue;
    info.dp_rank = info.dp_rank * mesh.shape()[d] + c[d];
    info.dp_size *= mesh.shape()[d];
  }
  return info;
}

TensorParallel tensor_parallel_for(const Scenario& s, int rank) {
  TensorParallel tp;
  const MeshInfo m = mesh_info_for(s, rank);
  if (!m.tp_group) return tp;
  tp.degree = m.tp_group->size();
  tp.index = m.tp_group->index_of(rank);
  tp.group = *m.tp_group;
  tp.loss_parallel = s.tensor_parallel.loss_parallel;
  tp.async = s.tensor_parallel.async && tp.degree > 1;
  return tp;
}

ContextParallel context_parallel_for(const Scenario& s, int rank) {
  ContextParallel cp;
  if (!s.context_parallel.enabled()) return cp;
  const MeshInfo m = mesh_info_for(s, rank);
  cp.degree = m.cp_group->size();
  cp.index = m.cp_group->index_of(rank);
  cp.group = *m.cp_group;
  cp.rotate = s.context_parallel.rotate_method;
  return cp;
}

ExpertParallel expert_parallel_for(const Scenario& s, int rank) {
  ExpertParallel ep;
  if (s.model.moe.enabled())  // NOTE [Recorded routing]: replay a record, else keep one
    ep.routing = s.training.moe_routing_record
                     ? std::make_shared<RoutingTape>(s.training.moe_routing_record, rank)
                     : std::make_shared<RoutingTape>();
  if (s.expert_parallel.degree <= 1) return ep;
  const MeshInfo m = mesh_info_for(s, rank);
  ep.degree = m.ep_group->size();
  ep.index = m.ep_group->index_of(rank);
  ep.group = *m.ep_group;
  ep.max_receive = s.expert_parallel.receive_buffers == ReceiveBuffers::kMax;
  return ep;
}

uint64_t symmetric_memory_bytes(const Scenario& s) {
  const int tp = s.fsdp.mesh_size("tp");
  if (!s.tensor_parallel.async || tp <= 1) return 0;
  const int64_t batch = s.training.batch_per_rank;  // tp > 1 refuses training.rank_batch
  const DType dt = s.fsdp.mixed_precision.param_dtype.value_or(s.training.orig_dtype);
  const int64_t seq = s.training.seq_len / s.fsdp.mesh_size("cp");  // this rank's tokens
  return ops::tp::symmetric_workspace_bytes(batch, seq, s.model.dim, tp, dtype_size(dt));
}

std::vector<BlockCheckpoint> block_checkpointing(const ActivationCheckpointing& ac,
                                                 int64_t n_layers) {
  std::vector<BlockCheckpoint> v(static_cast<size_t>(n_layers), BlockCheckpoint::kNone);
  for (int64_t i = 0; i < n_layers; ++i) {
    if (!recomputes_block(ac, i)) continue;
    v[i] = ac.mode == RecomputeMode::kSelectiveOp ? BlockCheckpoint::kOpSelective
                                                  : BlockCheckpoint::kFull;
  }
  return v;
}

ProcessGroup dp_cp_group(const Scenario& s, int rank) {
  DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  std::vector<int> dims;
  for (int d = 0; d < mesh.ndim(); ++d)
    if (d != mesh.dim_index("pp") && d != mesh.dim_index("tp")) dims.push_back(d);
  return mesh.group(rank, dims, "dp_cp");
}

AdamWOptions adamw_options(const Scenario& s) {
  const auto& oo = s.training.optimizer;
  AdamWOptions ao;
  ao.lr = oo.lr;
  ao.beta1 = oo.beta1;
  ao.beta2 = oo.beta2;
  ao.eps = oo.eps;
  ao.weight_decay = oo.weight_decay;
  ao.fused = oo.fused;
  return ao;
}

std::vector<ExpertBiasLayer> expert_bias_layers(const Scenario& s, Module& root, int64_t first,
                                                int64_t count,
                                                const std::vector<BlockCheckpoint>& block_ac) {
  std::vector<ExpertBiasLayer> out;
  if (s.model.moe.load_balance != MoeLoadBalance::kExpertBias) return out;
  for (int64_t i = first; i < first + count; ++i)
    if (s.model.moe.is_moe_layer(i))
      out.push_back({&root.child("layers").child(std::to_string(i)).child("moe"),
                     block_ac[static_cast<size_t>(i)] != BlockCheckpoint::kNone});
  return out;
}

ParameterCounts count_parameters(const Scenario& s) {
  ParameterCounts n;
  Transformer model(s.model);
  freeze_parameters(model.root(), s.training.frozen, s.model.lora.enabled(), frozen_dtype(s),
                    s.training.nf4);
  model.root().for_each_param([&n](Param& p) {
    const int64_t k = fullshard::numel(p.global_shape());
    n.total += k;
    if (p.requires_grad) n.trainable += k;
    if (p.fqn.find(".lora_") != std::string::npos) n.adapters += k;
  });
  return n;
}

TrainingProgram::~TrainingProgram() = default;

RoutingTape* TrainingProgram::routing() {
  if (pipeline_) return pipeline_->routing();
  return model_->expert_parallel().routing.get();
}

TrainingProgram::TrainingProgram(Backend& b, const Scenario& s) : b_(b), s_(s) {
  if (s.model.moe.enabled()) b.track_moe_memory();  // NOTE [MoE memory at the peak]
  b.set_blas_workspace_bytes(s.hardware.device.blas_workspace_bytes);  // NOTE [cuBLAS workspaces]
  if (s.pipeline.enabled()) {  // this rank's pipeline stages (core/train/pipeline_program.h)
    b.annotate("init");
    pipeline_ = std::make_unique<PipelineProgram>(b, s);
    return;
  }
  model_ = std::make_unique<Transformer>(s.model, tensor_parallel_for(s, b.rank()),
                                         expert_parallel_for(s, b.rank()));
  model_->set_context_parallel(context_parallel_for(s, b.rank()));
  set_init_seed(model_->root(), s.training.seed);
  // model.to(orig_dtype), then requires_grad_(False) before fully_shard, as torchtune and PEFT
  // freeze the base first (NOTE [Frozen parameters] in core/model/lora.cc).
  set_orig_dtype(model_->root(), s.training.orig_dtype);
  freeze_parameters(model_->root(), s.training.frozen, s.model.lora.enabled(), frozen_dtype(s),
                    s.training.nf4);
  // torchtitan converts before parallelizing; FSDP2 all-gathers in float8 only with a shard dim.
  const bool f8_all_gather =
      s.training.float8.enable_fsdp_float8_all_gather && s.fsdp.fsdp_shard_size() > 1;
  convert_to_float8_training(model_->root(), s.training.float8,
                             s.model.arch == ModelArch::kLlama && s.model.implementation.compile,
                             f8_all_gather);
  fsdp_ = std::make_unique<FSDPRuntime>(b, mesh_info_for(s, b.rank()));
  b.annotate("init");
  // NOTE [Initialisation modes] (core/train/model_init.cc)
  DeviceParams device_params;
  if (s.training.init == ModelInit::kDevice) device_params = build_on_device(b, model_->root());
  apply_fsdp(s, *model_, *fsdp_, false,
             s.training.init == ModelInit::kDevice ? &device_params : nullptr);
  FULLSHARD_CHECK(device_params.empty(), "a parameter's full tensor outlived fully_shard");
  // fsdp.forward_methods: register_fsdp_forward_method(model, name) after fully_shard(model).
  for (const std::string& method : s.fsdp.forward_methods)
    fsdp_->register_fsdp_forward_method(model_->root(), method);
  if (s.training.init == ModelInit::kBroadcastFromRank0) {
    ProcessGroup world{"world", {}};
    for (int r = 0; r < s.world_size(); ++r) world.ranks.push_back(r);
    load_full_state_from_rank0(b, model_->root(), world);
  }
  for (auto& st : fsdp_->states())
    if (st->group)
      for (FSDPParam* p : st->group->fsdp_params()) {
        (p->param().requires_grad ? all_params_ : frozen_params_).push_back(p);
        if (f8_all_gather && s.training.float8.precompute_float8_dynamic_scale_for_fsdp &&
            p->float8_all_gather()) {
          float8_params_.push_back(p);
          float8_group_ = st->group->config().shard_group;
        }
      }
  optim_ = std::make_unique<AdamW>(b, all_params_, adamw_options(s));
  block_ac_ = block_checkpointing(s.training.activation_checkpointing, s.model.n_layers);
  // MoE's buffers (NOTE [Expert bias] in core/model/expert_bias.h): whole on every rank.
  allocate_buffers(b, model_->root());
  model_->moe_aux_loss() = moe_aux_loss_state(model_->root(), s_.model);
  expert_bias_layers_ = expert_bias_layers(s, model_->root(), 0, s.model.n_layers, block_ac_);
}

// kLoadBatch into new int64 [B, S] tokens and labels (iargs: step, micro-batch, accumulation,
// split, data-parallel index and size: ranks of one tp group read the same batch).
std::pair<Tensor, Tensor> TrainingProgram::load_batch(int64_t step, int64_t micro, int64_t accum,
                                                      int64_t split, const std::string& what) {
  const auto& t = s_.training;
  const ContextParallel cp = context_parallel_for(s_, b_.rank());
  // With cp, this rank's shard of each sequence (NOTE [Context-parallel layout]): torchtitan
  // loads the [B, S] batch and context_parallel shards it in place; kLoadBatch writes the shard.
  TensorMeta ids{DType::kInt64, {t.batch_for(b_.rank()), t.seq_len / cp.degree}};
  Tensor tokens = empty_tensor(b_, ids, MemCategory::kActivation, StreamRole::kDefault,
                                what.empty() ? "input tokens" : what + "tokens");
  Tensor labels =
      empty_tensor(b_, ids, MemCategory::kActivation, StreamRole::kDefault, what + "labels");
  OpCall load;
  load.kind = OpKind::kLoadBatch;
  load.name = "load " + what + "batch";
  load.outputs = {tokens.ref(), labels.ref()};
  load.bytes = static_cast<double>(2 * ids.nbytes());
  const MeshInfo mi = mesh_info_for(s_, b_.rank());
  LoadBatchArgs a;  // core/runtime/layer_args.h
  a.step = step;
  a.micro_batch = micro;
  a.accumulation = accum;
  a.split = split;
  a.dp_rank = mi.dp_rank;
  a.dp_size = mi.dp_size;
  a.cp = cp.degree;
  a.cp_index = cp.index;
  a.encode(load);
  b_.launch(StreamRole::kDefault, load);
  return {std::move(tokens), std::move(labels)};
}

Value TrainingProgram::forward_loss(ExecContext& c, const Tensor& tokens, const Tensor& labels,
                                    const std::vector<BlockCheckpoint>& block_ac,
                                    double grad_scale) {
  const ModelImplementation& impl = s_.model.implementation;
  // With load_balance "aux_loss" the routers add coeff * aux to the loss (NOTE [Auxiliary
  // load-balancing loss] in core/model/moe_aux_loss.h).
  MoeAuxLoss& aux = model_->moe_aux_loss();
  aux.grad_seed = grad_scale;
  moe_aux_loss_begin(c, aux);
  Value loss;
  if (impl.loss != LossImpl::kChunked) {
    loss = model_->forward(c, tokens, labels, block_ac);
  } else {
    ChunkedLossOptions o;
    o.chunks = impl.loss_chunks;
    o.grad_scale = grad_scale;
    // pred = model(inputs) with _skip_lm_head; loss = loss_fn(pred, labels); del pred.
    loss = chunked_loss(c, *model_, *fsdp_, model_->hidden_forward(c, tokens, block_ac), labels, o);
  }
  moe_aux_loss_end(c, aux, loss.t);
  return loss;
}

// NOTE [Global valid tokens]: torchtitan (trainer.py, b5bcd76) sums the cross-entropy over a
// micro-batch's tokens and divides it by the step's valid tokens over every data-parallel rank
// (global_valid_tokens, an all-reduce of the counts), with FSDP2's gradient division off, so the
// reductions sum: the gradient is that of the mean over the global batch even when ranks hold
// different batches. fullshard's batches have no ignored labels, so the count is known on the
// host: the loss stays this rank's mean and its gradient seed is (tokens of the micro-batch) /
// (global tokens) instead of 1 / k, the same gradient (the count's all-reduce, a few
// microseconds, is not issued). Under "mean" each rank's seed is 1 / k and FSDP2 averages.
double TrainingProgram::loss_grad_scale() const {
  const auto& t = s_.training;
  if (s_.model.implementation.loss_normalization != LossNormalization::kGlobalValidTokens)
    return 1.0 / static_cast<double>(t.grad_accum_steps);
  const int tp = s_.fsdp.mesh_size("tp");  // ranks of one tp group share their batch
  int64_t global = 0;
  for (int r = 0; r < b_.world_size(); ++r) global += t.batch_for(r);
  global /= tp;
  return static_cast<double>(t.batch_for(b_.rank())) /
         (static_cast<double>(global) * static_cast<double>(t.grad_accum_steps));
}

void TrainingProgram::micro_step(int step, int micro) {
  // fsdp.unshard: `module.unshard(async_op=...)` before the batch is made, as pytorch/examples'
  // distributed/FSDP2/example.py (@5e960d87, --explicit-prefetching) calls model.unshard(); an
  // async handle is not waited on: the unit's pre-forward waits (NOTE [Async unshard] in
  // core/fsdp/fsdp_param_group.cc).
  for (const std::string& unit : s_.fsdp.unshard_modules)
    fsdp_->unshard(fsdp_unit(*model_, *fsdp_, unit), s_.fsdp.unshard_async_op);
  auto [tokens, labels] = load_batch(step, micro, s_.training.grad_accum_steps, 0, "");

  Graph graph;
  ExecContext c(b_, &graph, fsdp_.get());
  b_.annotate("forward");
  const double grad_scale = loss_grad_scale();
  Value loss = forward_loss(c, tokens, labels, block_ac_, grad_scale);
  b_.read_scalar(StreamRole::kDefault, loss.t.ref());  // the host logs loss.item() at the step end
  b_.annotate("backward");
  // loss.backward(): the seed is ones_like(loss).
  Tensor seed = empty_tensor(b_, loss.t.meta(), MemCategory::kTemporary, StreamRole::kDefault,
                              "loss grad seed");
  OpCall fill;
  fill.kind = OpKind::kFill;
  fill.name = "ones_like(loss)";
  fill.outputs = {seed.ref()};
  // With gradient accumulation the loss is scaled by 1/k (torchtitan's rescale of the
  // accumulated loss), so k micro-batches give the gradient of one k-times-larger batch; under
  // the global-token loss by this micro-batch's share of the step's tokens.
  FillArgs{grad_scale}.encode(fill);
  b_.launch(StreamRole::kDefault, fill);
  uint64_t loss_id = loss.id;
  loss = Value{};
  graph.backward(b_, loss_id, std::move(seed));
  fsdp_->post_backward_final_callback();
}

// NOTE [Validation pass]: torchtitan's validator and nanoGPT's estimate_loss run the model in
// eval mode under torch.no_grad: a forward that records no graph and saves nothing, through
// the same FSDP hooks (each unit all-gathers its parameters and, with reshard_after_forward,
// frees them again). Units that keep their parameters unsharded after forward (the root by
// default) would wait for a backward that never comes, so they are resharded at the end, as
// FSDP2's final callback would. The simulator never plays this pass (`fullshard simulate`
// predicts training steps); its allocations are below a training step's (no activations are
// saved), so they do not raise the peak, but they do appear in a measured timeline.
double TrainingProgram::eval_loss(int batches) {
  FULLSHARD_CHECK(!pipeline_, "a validation pass of pipeline stages is not built yet");
  b_.annotate("validation");
  for (int i = 0; i < batches; ++i) {
    auto [tokens, labels] = load_batch(i, 0, 1, 1, "validation ");  // split 1: the validation data
    ExecContext c(b_, nullptr, fsdp_.get());
    Value loss = forward_loss(c, tokens, labels, {}, 1.0);
    b_.read_scalar(StreamRole::kDefault, loss.t.ref());
  }
  fsdp_->reset_iter_state();
  for (auto& st : fsdp_->states())
    if (st->group && st->group->is_unsharded()) st->group->reshard();
  b_.synchronize(b_.record_event(StreamRole::kDefault));
  b_.annotate("validation end");
  std::vector<double> losses = b_.take_scalars();
  if (losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (double l : losses) sum += l;
  return sum / static_cast<double>(losses.size());
}

// A generation loop's first call, as torchtune's / trl's evaluation runs model.generate between
// training steps (NOTE [Forward methods] in core/fsdp/fully_shard.cc): no graph; each block's
// own hooks all-gather and reshard it; the root's only when generate is registered, and the
// root then stays unsharded after it (reshard_after_forward False), so the pass reshards what
// is left unsharded, as a validation pass does (NOTE [Validation pass]).
void TrainingProgram::generate_pass(int step) {
  FULLSHARD_CHECK(!pipeline_, "model.generate() of pipeline stages is not built");
  b_.annotate("generate");
  {
    auto [tokens, labels] = load_batch(step, 0, s_.training.grad_accum_steps, 0, "generate ");
    ExecContext c(b_, nullptr, fsdp_.get());
    Value logits = model_->generate(c, tokens);
  }
  fsdp_->reset_iter_state();
  for (auto& st : fsdp_->states())
    if (st->group && st->group->is_unsharded()) st->group->reshard();
  b_.annotate("generate end");
}

double TrainingProgram::run_step(int step) {
  if (pipeline_) return pipeline_->run_step(step);
  b_.set_step(step);
  const int k = s_.training.grad_accum_steps;
  for (int m = 0; m < k; ++m) {
    if (k > 1 && s_.training.accumulation_sync == AccumulationSync::kNone)
      fsdp_->set_requires_gradient_sync(m == k - 1);
    if (k > 1 && s_.training.accumulation_sync == AccumulationSync::kReduceScatter)
      fsdp_->set_requires_all_reduce(m == k - 1);
    if (k > 1 && !s_.training.reshard_after_backward_during_accumulation)
      fsdp_->set_reshard_after_backward(m == k - 1);
    micro_step(step, m);
  }
  if (before_optimizer_) before_optimizer_(step);
  b_.annotate("optimizer");
  if (s_.training.optimizer.max_grad_norm > 0)
    clip_grad_norm(b_, all_params_, s_.training.optimizer.max_grad_norm,
                   mesh_info_for(s_, b_.rank()));
  // build_optimizers_with_moe_load_balancing's step pre-hook (NOTE [Expert bias]).
  update_expert_bias(b_, expert_bias_layers_, s_.model.moe.load_balance_coeff,
                     dp_cp_group(s_, b_.rank()));
  optim_->step();
  // torchtitan's post_optimizer_hook (an optimizer step post-hook).
  if (float8_group_) precompute_float8_dynamic_scale_for_fsdp(b_, float8_params_, *float8_group_);
  // fsdp.post_optim_event: event = current_stream().record_event(); model.set_post_optim_event(
  // event), after the step and its post-hooks (NOTE [Post-optimizer event] in fully_shard.cc).
  if (s_.fsdp.post_optim_event) fsdp_->set_post_optim_event(b_.record_event(StreamRole::kDefault));
  optim_->zero_grad();
  // training.generate_every: model.generate(...) after every N-th step's optimizer step.
  if (s_.training.generate_every > 0 && (step + 1) % s_.training.generate_every == 0)
    generate_pass(step);
  // The host reads the loss back at the step boundary (loss.item()).
  b_.synchronize(b_.record_event(StreamRole::kDefault));
  b_.annotate("step end");
  std::vector<double> losses = b_.take_scalars();
  if (losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (double l : losses) sum += l;
  return sum / static_cast<double>(losses.size());
}

}  // namespace fullshard
