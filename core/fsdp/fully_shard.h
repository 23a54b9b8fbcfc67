#pragma once
// fully_shard over a module tree (FSDP2's _fully_shard.py + _fsdp_state.py): one state
// per call, applied bottom-up, each claiming the parameters no earlier call claimed. The
// runtime is the ModuleHooks the model's forward runs through.
#include <map>
#include <set>
#include <memory>
#include <vector>

#include "core/fsdp/fsdp_param_group.h"
#include "core/fsdp/ignored_param.h"
#include "core/fsdp/unshard_handle.h"
#include "core/mesh/mesh_info.h"
#include "core/model/autograd.h"

namespace fullshard {

class FSDPState {
 public:
  Module* module = nullptr;      // the first module of the call
  std::vector<Module*> modules;  // every module of the call (fully_shard([a, b]): two)
  // NOTE [Grouped units]: fully_shard([norm, output]) (torch/distributed/fsdp/_fully_shard/
  // _fsdp_state.py, _register_group_forward_hooks, PyTorch main of 2026): the state's
  // pre-forward runs on every module's pre-forward (the input cast and the group's unshard
  // for each), its one-shot work (the forward root, forward prefetch and the post-backward
  // hook on the input) on the first module of a pass; its post-forward (reshard, the
  // pre-backward hook on the output) when the last module of the pass finishes; a module's
  // other calls get only the output dtype cast. When a module does not run (a chunked loss
  // skips the output), the root's post-forward completes the state
  // (_force_complete_incomplete_states) and hooks its pre-backward on the root's output.
  // modules_to_run: the modules of the current pass still to run.
  std::set<const Module*> modules_to_run;
  std::unique_ptr<FSDPParamGroup> group;  // null when the call claimed no parameters
  bool is_root = false;
  TrainingState training_state = TrainingState::kIdle;
  MixedPrecisionPolicy mp;
  std::vector<FSDPState*> forward_prefetch;                  // set_modules_to_forward_prefetch
  std::optional<std::vector<FSDPState*>> backward_prefetch;  // set_modules_to_backward_prefetch
};

class FSDPRuntime : public ModuleHooks {
 public:
  FSDPRuntime(Backend& backend, MeshInfo mesh);
  const MeshInfo& mesh() const { return mesh_; }

  // fully_shard(module, ...): call bottom-up; the last call is the root (the module whose
  // forward runs first). Returns the new state.
  FSDPState& fully_shard(Module& module, const FullyShardOptions& options, bool is_root);
  // fully_shard([m1, m2, ...]): one state and one parameter group over several modules
  // (NOTE [Grouped units]). Never the root (FSDP2 requires a single root module).
  FSDPState& fully_shard(const std::vector<Module*>& modules, const FullyShardOptions& options);

  FSDPState* state_of(const Module& m);
  const std::vector<std::unique_ptr<FSDPState>>& states() const { return states_; }
  CommContext& comm() { return comm_; }
  // The parameters the calls ignored (FullyShardOptions::ignored_params), in call order.
  const std::vector<std::unique_ptr<IgnoredParam>>& ignored_params() const {
    return ignored_params_;
  }

  // ModuleHooks
  Value pre_forward(ExecContext& c, Module& m, Value x) override;
  Value post_forward(ExecContext& c, Module& m, Value y) override;
  bool is_forward_method(const Module& m, const std::string& method) const override;
  // register_fsdp_forward_method(module, method): `method` runs the state's pre- and
  // post-forward hooks around it as forward does; a no-op for a module fully_shard did not
  // reach (NOTE [Forward methods] in fully_shard.cc).
  void register_fsdp_forward_method(Module& m, const std::string& method);

  // The root's final backward callback (_root_post_backward_final_callback): post-backward
  // for groups autograd never reached, finalize, wait for the last reduce-scatter.
  void post_backward_final_callback();
  // FSDPModule.set_requires_gradient_sync over every state.
  void set_requires_gradient_sync(bool sync);
  // FSDPModule.set_is_last_backward: off, the final callback leaves finalize and the wait for
  // the last reduce-scatter to a later backward (a pipeline stage's microbatches but the last).
  void set_is_last_backward(bool last) { is_last_backward_ = last; }
  // FSDPModule.set_reshard_after_backward over every state.
  void set_reshard_after_backward(bool reshard);
  // PipelineStage.perform_reduce_grad (torch/distributed/pipelining/stage.py, PyTorch 2.11) after
  // a stage's last microbatch backward: is_last_backward, reshard_after_backward and gradient
  // sync on, post_backward of every group (root first, then pre-order), the final callback.
  void perform_reduce_grad();
  // FSDPModule.set_requires_all_reduce over every state (HSDP gradient accumulation that
  // reduce-scatters every micro-batch and all-reduces only the last).
  void set_requires_all_reduce(bool all_reduce);
  // FSDPModule.set_gradient_divide_factor / set_force_sum_reduction_for_comms over every state
  // (torchtitan's disable_fsdp_gradient_division loops over model.modules() the same way).
  void set_gradient_divide_factor(double factor);
  void set_force_sum_reduction_for_comms(bool enable);
  // FSDPModule._set_unshard_async_op on the root: every group's hooks unshard with `async_op`
  // (NOTE [Hooks' async unshard] in fsdp_param_group.cc).
  void set_unshard_async_op(bool async_op);
  // FSDPModule.set_post_optim_event on the root: the next root pre-forward's all-gather streams
  // wait on `event` instead of on the whole current stream (NOTE [Post-optimizer event]).
  void set_post_optim_event(EventId event) { post_optim_event_ = event; }
  // FSDPModule.unshard(async_op) on `s`'s modules (not recursive): all-gathers the group's
  // parameters unless they are unsharded or an all-gather is pending. async_op: returns the
  // handle (the module's pre-forward waits if nobody does); otherwise waits and returns none
  // (NOTE [Async unshard] in fsdp_param_group.cc).
  std::optional<UnshardHandle> unshard(FSDPState& s, bool async_op);
  // FSDPModule.reshard() (not recursive): frees the unsharded parameters.
  void reshard(FSDPState& s);
  // After a forward that no backward follows (validation): forget the pass's forward root and
  // the grouped states' modules still to run, so the next training forward starts clean
  // (as FSDP2's root post-backward callback would).
  void reset_iter_state();

 private:
  Backend& b_;
  MeshInfo mesh_;
  CommContext comm_;
  std::vector<std::unique_ptr<FSDPState>> states_;  // in fully_shard call order
  std::vector<std::unique_ptr<IgnoredParam>> ignored_params_;
  std::map<const Module*, FSDPState*> by_module_;
  std::vector<FSDPState*> all_states_;  // root first, then pre-order (lazy init order)
  bool lazy_inited_ = false;
  bool is_last_backward_ = true;
  FSDPState* iter_forward_root_ = nullptr;  // _state_ctx.iter_forward_root
  EventId post_optim_event_ = 0;            // _state_ctx.post_optim_event (0: none)
  std::set<std::pair<const Module*, std::string>> forward_methods_;

  void lazy_init();
  FSDPState& make_state(const std::vector<Module*>& modules, const FullyShardOptions& o,
                        bool is_root);
  // _force_complete_incomplete_states: the root's post-forward finishes the post-forward of
  // grouped states whose modules did not all run (a chunked loss skips the output module).
  Value force_complete_incomplete_states(ExecContext& c, Value y);
  Value register_pre_backward(ExecContext& c, FSDPState& s, Value y);
  void state_pre_backward(FSDPState& s);
  Value cast_value(ExecContext& c, Value x, DType to, const std::string& name);
};

}  // namespace fullshard
