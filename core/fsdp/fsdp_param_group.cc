#include "core/fsdp/fsdp_param_group.h"

#include "core/common/error.h"
#include "core/model/ops.h"
#include "core/model/tensor_parallel.h"

namespace fullshard {

namespace {
constexpr StreamRole kCurrent = StreamRole::kDefault;
}

MixedPrecisionPolicy resolve_mixed_precision(const MixedPrecisionPolicy& mp, DType orig) {
  MixedPrecisionPolicy r = mp;
  if (r.param_dtype && *r.param_dtype == orig) r.param_dtype.reset();
  DType grad_dtype = r.param_dtype.value_or(orig);
  if (r.reduce_dtype && *r.reduce_dtype == grad_dtype) r.reduce_dtype.reset();
  return r;
}

// NOTE [Original dtype]: FSDP2 takes each parameter's original dtype from the tensor it shards
// (_fsdp_param.py, FSDPParam.init_dtype_attrs: orig_dtype = sharded_param.dtype), so a model a
// script moved to bf16 before fully_shard (training.orig_dtype "bf16") keeps bf16 shards, and
// the gradients FSDP2 casts back to orig_dtype after the reduce-scatter and AdamW's zeros_like
// states are bf16 too: no fp32 master copy exists anywhere. Clamping is per parameter
// (param_dtype equal to orig_dtype becomes None), so with param_dtype bf16 nothing is cast: the
// shard is the all-gather input itself, with no foreach-copy buffer (collectives.cc), and the
// reduce-scatter runs in the gradient's dtype, bf16, unless reduce_dtype asks for fp32
// (_fsdp_collectives.py, foreach_reduce: reduce_dtype or the grad dtype, then a cast to
// orig_dtype). FSDPParamGroup._init_mp_dtypes (_fsdp_param_group.py) requires one original dtype
// and one reduce dtype over the group's trainable parameters (frozen ones may differ: NOTE
// [Frozen parameters] in core/model/lora.cc); the scenario gives every trainable one the same.
FSDPParamGroup::FSDPParamGroup(Backend& b, CommContext& comm, std::string name,
                               std::vector<Param*> params, GroupConfig config)
    : b_(b), comm_(comm), name_(std::move(name)), config_(std::move(config)) {
  std::optional<DType> trainable_orig;
  for (const Param* p : params) {
    if (!p->requires_grad) continue;
    FULLSHARD_CHECK(!trainable_orig || *trainable_orig == p->dtype,
                    name_ + ": FSDP expects uniform original parameter dtype");
    trainable_orig = p->dtype;
  }
  orig_dtype_ = trainable_orig.value_or(params.empty() ? DType::kFloat32 : params[0]->dtype);
  // Each parameter clamps the policy it was given (init_dtype_attrs); the group keeps the
  // clamped reduce dtype of its trainable parameters.
  const std::optional<DType> param_dtype = config_.mp.param_dtype;
  config_.mp = resolve_mixed_precision(config_.mp, orig_dtype_);
  const int world = config_.shard_group.size();
  const int rank = config_.shard_group.index_of(b.rank());
  FULLSHARD_CHECK(rank >= 0, "rank not in its shard group");
  for (Param* p : params) {
    const Tensor* full = nullptr;
    if (config_.device_params) {
      auto it = config_.device_params->find(p);
      FULLSHARD_CHECK(it != config_.device_params->end(), p->fqn + " has no full tensor");
      full = &it->second;
    }
    // A frozen parameter's original dtype is its own (training.frozen_dtype): FSDPParam's
    // orig_dtype is the sharded parameter's dtype (NOTE [Frozen parameters] in lora.cc).
    params_.push_back(std::make_unique<FSDPParam>(b, *p, world, rank, p->dtype,
                                                  param_dtype.value_or(p->dtype), config_.offload,
                                                  config_.shard_dim, full));
    params_.back()->set_pin_memory(config_.pin_memory);
    raw_.push_back(params_.back().get());
  }
  config_.device_params = nullptr;  // fully_shard drops them when it returns
}

DType FSDPParamGroup::reduce_dtype() const {
  return config_.mp.reduce_dtype.value_or(config_.mp.param_dtype.value_or(orig_dtype_));
}

// NOTE [Async unshard]: FSDPModule.unshard(async_op) (_fully_shard.py at pytorch@1d2fbd40) calls
// FSDPParamGroup.unshard(async_op); the handle's wait() is wait_for_unshard(), and async_op=False
// waits at once. get_all_gather_streams (_fsdp_param_group.py at pytorch@62a45b6f) gives FSDP's
// copy-in and all-gather streams only to a synchronous unshard in FORWARD or PRE_BACKWARD; a
// user's unshard copies in on the current stream, and runs the collective there when synchronous.
// An async one runs on the process group's stream (here kAllGather, after it waits for the
// current stream), and the copy-out's wait on the event after it is work.wait(). A pending
// unshard issues nothing again; its wait_for_unshard never defers the output's free and makes
// FSDP's two all-gather streams wait on the copy-out at once. Why queueing behind FSDP's own
// all-gathers orders nothing NCCL would not: docs/fsdp2-correspondence.md (unshard row).
AllGatherStreams FSDPParamGroup::all_gather_streams(bool async_op) const {
  if (!async_op &&
      (state_ == TrainingState::kForward || state_ == TrainingState::kPreBackward))
    return {};
  return AllGatherStreams{kCurrent, async_op ? StreamRole::kAllGather : kCurrent};
}

void FSDPParamGroup::wait_all_gather_streams_on_event(EventId event, bool async_op) {
  // FSDP2 waits its two streams in every state. A synchronous wait outside FORWARD / PRE_BACKWARD
  // (the chunked loss's unshard of the output, in IDLE) keeps fullshard's earlier current-stream
  // wait, so that no existing prediction moves; the next root pre-forward's wait_stream on the
  // current stream orders the all-gather streams behind it anyway.
  const AllGatherStreams s = async_op ? AllGatherStreams{} : all_gather_streams(false);
  b_.wait_event(s.copy_in, event);
  b_.wait_event(s.all_gather, event);
}

ProcessGroup FSDPParamGroup::post_forward_group() const {
  // The size the post-forward shards were made with: set_reshard_after_forward may have
  // changed the setting since (a chunked loss does, between forward and its unshard).
  const int n = sharded_state_ == ShardedState::kShardedPostForward ? post_forward_shards_size_
                                                                    : config_.post_forward_size;
  return fullshard::post_forward_group(config_.shard_group, b_.rank(), n);
}

// ------------------------------------------------------------------ unshard / reshard
void FSDPParamGroup::unshard(bool async_op) {
  if (all_gather_result_) return;  // already issued, pending wait
  if (is_unsharded()) return;
  if (!unshard_in_backward_ && state_ == TrainingState::kPreBackward) return;
  if (reshard_after_forward_event_) {
    // Post-forward shards are allocated on the default stream and read by the AG streams.
    wait_all_gather_streams_on_event(reshard_after_forward_event_, async_op);
    reshard_after_forward_event_ = 0;
  }
  const bool from_post_forward = sharded_state_ == ShardedState::kShardedPostForward;
  ProcessGroup group = from_post_forward ? post_forward_group() : config_.shard_group;
  if (group.size() == 1) {
    // A placeholder result (no output buffer, an event on the current stream) so that
    // wait_for_unshard does the work (NOTE [World-size-1 shortcut], below).
    FULLSHARD_CHECK(!from_post_forward, name_ + ": post-forward shards over one rank");
    AllGatherResult r;
    r.world = 1;
    r.event = b_.record_event(kCurrent);
    all_gather_result_ = std::move(r);
    return;
  }
  all_gather_result_ =
      foreach_all_gather(b_, raw_, group, from_post_forward, all_gather_streams(async_op), name_);
  all_gather_result_->async_op = async_op;
  ++all_gathers_;
}

// NOTE [World-size-1 shortcut]: newer FSDP2 (_fsdp_param_group.py) skips the all-gather when
// the all-gather group has one rank: unshard() stores an AllGatherResult with an empty output
// and an event recorded on the current stream, and wait_for_unshard() fills each parameter's
// unsharded storage (init_all_gather_outputs + alloc_storage, the same bytes as a copy-out) on
// the current stream with tensor.copy_(fsdp_param.all_gather_inputs[0]): the sharded data
// itself, or (offload) its H2D copy and (mixed precision) its cast, temporaries allocated on the
// current stream. The loop variable keeps the last input alive until wait_for_unshard returns,
// and each one is dropped when the next is made. No copy-in, no all-gather buffer, no collective;
// the copy-out is never deferred (the all-gather streams wait on its event at once), so an
// implicit or explicit prefetch issues nothing and the work happens at the group's own wait.
// foreach_reduce's side is in collectives.cc. HSDP with a one-rank shard group keeps its
// replicate all-reduce. A shard group of one rank has no post-forward group (int
// reshard_after_forward needs 1 < N) and no float8 all-gather (the scenario refuses both); an
// NF4 weight copies its three parts (quantized_data, scalers, factors) into its three outputs.
void FSDPParamGroup::copy_in_place() {
  Tensor held;  // `all_gather_input`, alive until the caller returns
  for (FSDPParam* p : raw_) {
    FULLSHARD_CHECK(!p->float8_all_gather(), p->param().fqn + ": float8 all-gather over one rank");
    const std::string& fqn = p->param().fqn;
    if (p->nf4()) {  // NF4's three pre-all-gather parts, each into its own output (no offload)
      p->alloc_unsharded(b_);
      const std::vector<Tensor> outs = p->all_gather_outputs();
      const std::vector<Tensor>& parts = p->nf4_sharded_parts();
      FULLSHARD_CHECK(outs.size() == parts.size(), fqn + ": NF4 parts and outputs differ");
      for (size_t k = 0; k < outs.size(); ++k)
        ops::copy_into(b_, kCurrent, outs[k], parts[k], fqn + " unshard copy (world 1)");
      continue;
    }
    Tensor in = p->sharded_data();
    if (p->offload()) {  // .to(device, non_blocking=True)
      Tensor dev = empty_tensor(b_, in.meta(), MemCategory::kAllGather, kCurrent, fqn + " (H2D)");
      ops::copy_into(b_, kCurrent, dev, in, fqn + " H2D");
      in = std::move(dev);
    }
    if (p->param_dtype() != p->orig_dtype())
      in = ops::cast(b_, kCurrent, in, p->param_dtype(), MemCategory::kAllGather,
                     fqn + " all_gather_input cast");
    held = std::move(in);  // the previous input goes now
    p->alloc_unsharded(b_);
    ops::copy_into(b_, kCurrent, p->unsharded_storage(), held, fqn + " unshard copy (world 1)");
  }
  held_input_ = std::move(held);
}

void FSDPParamGroup::wait_for_unshard() {
  if (!all_gather_result_) return;
  const bool async_op = all_gather_result_->async_op;
  if (state_ == TrainingState::kForward && comm_.all_gather_state) {
    // Implicit forward prefetch: free the previous group's AG output now, after the AG
    // streams wait on its copy-out (NOTE [Buffers travel with events]).
    wait_all_gather_streams_on_event(comm_.all_gather_state->event, false);
    comm_.all_gather_state.reset();
  }
  const bool world_one = all_gather_result_->world == 1;  // NOTE [World-size-1 shortcut]
  if (world_one)
    copy_in_place();
  else
    foreach_all_gather_copy_out(b_, *all_gather_result_, raw_, name_);
  for (FSDPParam* p : raw_) {
    p->post_forward_shard() = Tensor();  // to_unsharded drops the post-forward shard
    p->set_state(ShardedState::kUnsharded);
  }
  sharded_state_ = ShardedState::kUnsharded;
  EventId copy_out = b_.record_event(kCurrent);
  if (state_ == TrainingState::kForward && !world_one && !async_op) {
    // Defer the free so this copy-out overlaps the next group's all-gather.
    comm_.all_gather_state = BufferWithEvent{all_gather_result_->output, copy_out};
  } else {
    wait_all_gather_streams_on_event(copy_out, async_op);  // NOTE [Async unshard]
  }
  all_gather_result_.reset();
  held_input_ = Tensor();  // the last all-gather input goes when wait_for_unshard returns
}

void FSDPParamGroup::to_sharded_post_forward() {
  const int n = config_.post_forward_size;
  const int idx = post_forward_group().index_of(b_.rank());
  for (FSDPParam* p : raw_) {
    const Tensor& full = p->unsharded_storage();
    const int64_t numel = full.numel() / n;
    Tensor src = full.view({full.dtype(), {numel}},
                           static_cast<uint64_t>(numel) * idx * dtype_size(full.dtype()));
    p->post_forward_shard() = empty_tensor(b_, src.meta(), MemCategory::kUnshardedParam, kCurrent,
                                            p->param().fqn + " (post-forward shard)");
    ops::copy_into(b_, kCurrent, p->post_forward_shard(), src,
                   p->param().fqn + " post-forward clone");
    p->free_unsharded();
    p->set_state(ShardedState::kShardedPostForward);
  }
  sharded_state_ = ShardedState::kShardedPostForward;
  post_forward_shards_size_ = n;
}

void FSDPParamGroup::reshard() {
  if (state_ == TrainingState::kForward) {
    if (!config_.reshard_after_forward) return;
    if (config_.post_forward_size > 0) {
      if (sharded_state_ != ShardedState::kUnsharded) return;
      to_sharded_post_forward();
      reshard_after_forward_event_ = b_.record_event(kCurrent);
      return;
    }
  }
  for (FSDPParam* p : raw_) {
    p->free_unsharded();
    p->post_forward_shard() = Tensor();
    p->set_state(ShardedState::kSharded);
  }
  sharded_state_ = ShardedState::kSharded;
}

// ------------------------------------------------------------------ hooks
// NOTE [Hooks' async unshard]: FSDPModule._set_unshard_async_op(True) (_fully_shard.py at
// pytorch@0257dd1c) sets unshard_async_op on the parameter groups of every FSDP module under the
// one it is called on; pre_forward, pre_backward and _prefetch_unshard (_fsdp_param_group.py at
// pytorch@002a76fb) then call unshard(unshard_async_op). An async unshard copies in on the current
// stream and all-gathers on the process group's stream (NOTE [Async unshard]), so the all-gather
// buffers come from the current stream's pool (the inter-stream fragmentation the docstring says
// it avoids), the cast and copy-in no longer overlap compute, and the copy-out's free is never
// deferred. Without explicit forward prefetching each forward all-gather is exposed: the
// pre-forward waits for it at once. Backward's implicit prefetch still issues the next unit's
// all-gather ahead, and FSDP's copy-in stream is left idle.
// The host work of the Python hook itself (NOTE [FSDP hook host cost] in
// simulator/cost/hardware_cost_model.cc), before the work it issues.
void FSDPParamGroup::hook(const char* what) {
  b_.fsdp_hook(name_ + " " + what, static_cast<int>(raw_.size()));
}

void FSDPParamGroup::pre_forward() {
  hook("pre_forward");
  state_ = TrainingState::kForward;
  unshard(unshard_async_op_);
  wait_for_unshard();
}

void FSDPParamGroup::post_forward() {
  hook("post_forward");
  reshard();
  post_forward_indices_.push_back(static_cast<int>(comm_.post_forward_order.size()));
  comm_.post_forward_order.push_back(this);
  state_ = TrainingState::kIdle;
}

void FSDPParamGroup::prefetch_unshard(FSDPParamGroup& target, TrainingState state) {
  TrainingState saved = target.state_;
  target.state_ = state;
  target.unshard(target.unshard_async_op_);
  target.state_ = saved;
}

void FSDPParamGroup::pre_backward(bool default_prefetch) {
  if (state_ == TrainingState::kPreBackward) return;
  hook("pre_backward");
  state_ = TrainingState::kPreBackward;
  unshard(unshard_async_op_);  // no-op when prefetched
  wait_for_unshard();
  if (default_prefetch) backward_prefetch();
}

void FSDPParamGroup::backward_prefetch() {
  // Reverse post-forward order, one group ahead (_backward_prefetch).
  if (post_forward_indices_.empty()) return;
  int curr = post_forward_indices_.back();
  post_forward_indices_.pop_back();
  int target = curr - 1;
  if (target < 0) return;
  prefetch_unshard(*comm_.post_forward_order[static_cast<size_t>(target)],
                   TrainingState::kPreBackward);
}

void FSDPParamGroup::post_backward() {
  hook("post_backward");
  state_ = TrainingState::kPostBackward;
  // accumulate_unsharded_grad_if_needed
  for (FSDPParam* p : raw_) {
    if (p->unsharded_accumulated_grad() && p->has_unsharded_grad()) {
      Tensor g = p->take_unsharded_grad();
      ops::add_into(b_, p->unsharded_accumulated_grad(), g,
                    p->param().fqn + " accumulate (reduce dtype)");
    }
  }
  if (!reduce_grads_) {
    if (reshard_after_backward_) reshard();
    // to_accumulated_grad_if_needed: upcast to the reduce dtype, after resharding.
    for (FSDPParam* p : raw_) {
      if (config_.mp.reduce_dtype && p->has_unsharded_grad() && !p->unsharded_accumulated_grad()) {
        Tensor g = p->take_unsharded_grad();
        p->unsharded_accumulated_grad() =
            ops::cast(b_, kCurrent, g, *config_.mp.reduce_dtype, MemCategory::kUnshardedGrad,
                      p->param().fqn + " accumulated grad");
      }
    }
    return;
  }
  std::vector<FSDPParam*> with_grad;
  std::vector<Tensor> grads;
  for (FSDPParam* p : raw_) {
    if (p->unsharded_accumulated_grad()) {
      with_grad.push_back(p);
      grads.push_back(std::move(p->unsharded_accumulated_grad()));
      p->unsharded_accumulated_grad() = Tensor();
    } else if (p->has_unsharded_grad()) {
      with_grad.push_back(p);
      grads.push_back(p->take_unsharded_grad());
    }
  }
  if (reshard_after_backward_) reshard();
  if (with_grad.empty()) return;
  // FSDPParam.unsharded_grad_data -> _get_grad_inner_tensor: a gradient whose placement
  // differs from the parameter's tp placement (Partial for a replicated, sequence-parallel
  // norm weight) is redistributed, an all-reduce over tp on the current stream.
  if (config_.tp_group && config_.tp_group->size() > 1)
    for (size_t i = 0; i < with_grad.size(); ++i)
      if (with_grad[i]->param().tp_placement == TpPlacement::kReplicate &&
          !with_grad[i]->param().tp_grad_replicated)
        grads[i] = ops::tp::all_reduce_grad(b_, grads[i], *config_.tp_group,
                                            with_grad[i]->param().fqn + " grad all_reduce(tp)");
  if (comm_.reduce_scatter_state) {
    b_.wait_event(kCurrent, comm_.reduce_scatter_state->event);
    comm_.reduce_scatter_state.reset();
  }
  // A second reduction of this group in one backward (a chunked loss with one chunk reduces the
  // output's gradient in the chunk's backward, then the norm's in the decoder backward) first
  // waits for the previous one, whose all-reduce input and post-reduce work would otherwise be
  // dropped while its streams may still use them (FSDPParamGroup._wait_for_post_backward).
  wait_for_post_backward();
  ReduceOptions o;
  o.reduce_scatter_group = &config_.shard_group;
  o.all_reduce_group = config_.replicate_group ? &*config_.replicate_group : nullptr;
  o.reduce_dtype = reduce_dtype();
  // A factor fully_shard was given (torchtitan's experts: the whole data-parallel size) unless
  // FSDPModule.set_gradient_divide_factor set one since.
  GradientDivideOptions divide = divide_;
  if (!divide.factor && config_.gradient_divide_factor > 0)
    divide.factor = static_cast<double>(config_.gradient_divide_factor);
  o.factors = gradient_divide_factors(config_.shard_group.size(),
                                      config_.replicate_group ? config_.replicate_group->size() : 0,
                                      o.reduce_dtype, divide);
  o.gradient_divide_factor = divide.factor;
  o.all_reduce_grads = all_reduce_grads_;
  o.partial_reduce_output = std::move(partial_reduce_output_);
  ReduceResult r = foreach_reduce(b_, with_grad, std::move(grads), o, name_);
  partial_reduce_output_ = std::move(r.partial_reduce_output);
  ++reduce_scatters_;
  comm_.reduce_scatter_state = r.reduce_scatter_input;
  post_reduce_event_ = r.post_reduce_event;
  if (r.all_reduce_input) all_reduce_state_ = r.all_reduce_input;
  for (EventId e : r.grad_offload_events) grad_offload_events_.push_back(e);
}

void FSDPParamGroup::wait_for_post_backward() {
  if (post_reduce_event_) {
    b_.wait_event(kCurrent, post_reduce_event_);
    post_reduce_event_ = 0;
  }
  if (all_reduce_state_) {
    b_.wait_event(kCurrent, all_reduce_state_->event);
    all_reduce_state_.reset();
  }
}

void FSDPParamGroup::finalize_backward() {
  wait_for_post_backward();
  for (EventId e : grad_offload_events_) b_.synchronize(e);
  grad_offload_events_.clear();
  if (all_gather_result_) {
    // A mistargeted prefetch without a wait: wait for it and drop it.
    b_.wait_event(kCurrent, all_gather_result_->event);
    all_gather_result_.reset();
  }
  post_forward_indices_.clear();
  state_ = TrainingState::kIdle;
}

}  // namespace fullshard
