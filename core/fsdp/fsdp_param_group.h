#pragma once
// One fully_shard call's parameters (FSDP2's FSDPParamGroup, _fsdp_param_group.py): one
// all-gather and one reduce-scatter per pass, the unshard/reshard state machine, and the
// hooks' group-level work.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fsdp/collectives.h"
#include "core/fsdp/fsdp_api.h"

namespace fullshard {

enum class TrainingState : uint8_t { kIdle, kForward, kPreBackward, kPostBackward };

class FSDPParamGroup;

// State shared by all groups under one root (FSDPCommContext).
struct CommContext {
  std::optional<BufferWithEvent> all_gather_state;      // forward: previous AG output
  std::optional<BufferWithEvent> reduce_scatter_state;  // previous RS input
  std::vector<FSDPParamGroup*> post_forward_order;
};

struct GroupConfig {
  ProcessGroup shard_group;
  std::optional<ProcessGroup> replicate_group;  // HSDP
  std::optional<ProcessGroup> tp_group;         // tensor parallelism (2-D / 3-D meshes)
  MixedPrecisionPolicy mp;  // clamped to the original dtype (see resolve_mixed_precision)
  bool offload = false;
  bool pin_memory =
      true;  // CPUOffloadPolicy.pin_memory (NOTE [Pageable offload] in collectives.cc)
  bool reshard_after_forward = true;
  int post_forward_size = 0;       // int reshard_after_forward N (1 < N < W), else 0
  int shard_dim = 0;               // FullyShardOptions::shard_dim
  int gradient_divide_factor = 0;  // FullyShardOptions::gradient_divide_factor (0: unset)
  const DeviceParams* device_params = nullptr;  // FullyShardOptions::device_params
};

// FSDP2's clamping (FSDPParam.init_dtype_attrs): param_dtype equal to the original dtype
// and reduce_dtype equal to the param dtype become unset.
MixedPrecisionPolicy resolve_mixed_precision(const MixedPrecisionPolicy& mp, DType orig);

class FSDPParamGroup {
 public:
  FSDPParamGroup(Backend& backend, CommContext& comm, std::string name, std::vector<Param*> params,
                 GroupConfig config);

  const std::string& name() const { return name_; }
  const GroupConfig& config() const { return config_; }
  const std::vector<FSDPParam*>& fsdp_params() const { return raw_; }
  TrainingState training_state() const { return state_; }
  bool is_unsharded() const { return sharded_state_ == ShardedState::kUnsharded; }
  ShardedState sharded_state() const { return sharded_state_; }
  DType reduce_dtype() const;
  // The trainable parameters' original dtype (NOTE [Original dtype] in fsdp_param_group.cc).
  DType orig_dtype() const { return orig_dtype_; }

  // ---- the unshard / reshard state machine ----
  // FSDPParamGroup.unshard(async_op): a no-op while an all-gather is pending or the group is
  // unsharded (NOTE [Async unshard]).
  void unshard(bool async_op = false);
  void wait_for_unshard();
  void reshard();
  // An all-gather issued and not yet waited for (_all_gather_result is not None).
  bool unshard_pending() const { return all_gather_result_.has_value(); }

  // ---- hooks ----
  void pre_forward();
  void post_forward();
  void pre_backward(bool default_prefetch);
  void post_backward();
  void finalize_backward();
  // Issue `target`'s unshard in `state` (FORWARD or PRE_BACKWARD): _prefetch_unshard.
  static void prefetch_unshard(FSDPParamGroup& target, TrainingState state);

  // ---- settings (FSDPModule setters) ----
  void set_requires_gradient_sync(bool sync) { reduce_grads_ = sync; }
  // HSDP: reduce-scatter but do not all-reduce (NOTE [Partial reduce without all-reduce]).
  void set_requires_all_reduce(bool all_reduce) { all_reduce_grads_ = all_reduce; }
  // NOTE [Gradient divide factors] in reduce_policy.h.
  void set_gradient_divide_factor(double factor) { divide_.factor = factor; }
  void set_force_sum_reduction_for_comms(bool enable) {
    divide_.force_sum_reduction_for_comms = enable;
  }
  void set_reshard_after_backward(bool v) { reshard_after_backward_ = v; }
  // FSDPModule.set_unshard_in_backward: false for a group whose parameters backward never reads
  // (an embedding): unshard() in PRE_BACKWARD, its own or a prefetch, then all-gathers nothing.
  void set_unshard_in_backward(bool v) { unshard_in_backward_ = v; }
  // FSDPParamGroup.unshard_async_op (FSDPModule._set_unshard_async_op): the async_op of the
  // hooks' own unshards, pre-forward, pre-backward and prefetches (NOTE [Hooks' async unshard]).
  void set_unshard_async_op(bool v) { unshard_async_op_ = v; }
  // FSDPModule.set_reshard_after_forward(bool): reshard to the full shard group (True) or
  // keep the parameters unsharded (False) from the next post-forward on.
  void set_reshard_after_forward(bool v) {
    config_.reshard_after_forward = v;
    config_.post_forward_size = 0;
  }

  // Counts of what this group issued (tests compare them with FSDP2's).
  int all_gathers_issued() const { return all_gathers_; }
  int reduce_scatters_issued() const { return reduce_scatters_; }

 private:
  void hook(const char* what);  // Backend::fsdp_hook for this group

  Backend& b_;
  CommContext& comm_;
  std::string name_;
  GroupConfig config_;
  DType orig_dtype_ = DType::kFloat32;
  std::vector<std::unique_ptr<FSDPParam>> params_;
  std::vector<FSDPParam*> raw_;
  TrainingState state_ = TrainingState::kIdle;
  ShardedState sharded_state_ = ShardedState::kSharded;
  std::optional<AllGatherResult> all_gather_result_;
  EventId reshard_after_forward_event_ = 0;
  EventId post_reduce_event_ = 0;
  std::optional<BufferWithEvent> all_reduce_state_;
  std::vector<EventId> grad_offload_events_;
  std::vector<int> post_forward_indices_;
  int post_forward_shards_size_ = 0;  // the N of the current post-forward shards
  bool reduce_grads_ = true;
  bool all_reduce_grads_ = true;
  GradientDivideOptions divide_;
  Tensor partial_reduce_output_;  // HSDP: the reduce-scatter outputs summed so far
  bool reshard_after_backward_ = true;
  bool unshard_in_backward_ = true;
  bool unshard_async_op_ = false;
  int all_gathers_ = 0;
  int reduce_scatters_ = 0;

  Tensor held_input_;    // NOTE [World-size-1 shortcut]: the last input until the wait returns
  void copy_in_place();  // wait_for_unshard over one rank (NOTE [World-size-1 shortcut])
  void backward_prefetch();
  void wait_for_post_backward();
  void to_sharded_post_forward();
  AllGatherStreams all_gather_streams(bool async_op) const;
  // _wait_all_gather_streams_on_event: FSDP2's copy-in and all-gather streams (an async result's
  // or in FORWARD / PRE_BACKWARD; a synchronous one otherwise waits the current stream).
  void wait_all_gather_streams_on_event(EventId event, bool async_op);
  ProcessGroup post_forward_group() const;
};

}  // namespace fullshard
