#include "core/fsdp/fully_shard.h"

#include <set>

#include "core/common/error.h"
#include "core/model/ops.h"

namespace fullshard {

namespace {
constexpr StreamRole kCurrent = StreamRole::kDefault;
}

FSDPRuntime::FSDPRuntime(Backend& backend, MeshInfo mesh) : b_(backend), mesh_(std::move(mesh)) {}

FSDPState& FSDPRuntime::fully_shard(Module& module, const FullyShardOptions& o, bool is_root) {
  return make_state({&module}, o, is_root);
}

FSDPState& FSDPRuntime::fully_shard(const std::vector<Module*>& modules,
                                    const FullyShardOptions& o) {
  FULLSHARD_CHECK(!modules.empty(), "fully_shard of an empty module list");
  return make_state(modules, o, false);
}

FSDPState& FSDPRuntime::make_state(const std::vector<Module*>& modules, const FullyShardOptions& o,
                                   bool is_root) {
  for (Module* m : modules)
    FULLSHARD_CHECK(!by_module_.count(m), "fully_shard called twice on '" + m->fqn + "'");
  auto s = std::make_unique<FSDPState>();
  s->module = modules.front();
  s->modules = modules;
  s->is_root = is_root;
  s->mp = o.mp_policy;
  std::vector<Param*> params;
  for (Module* m : modules)
    m->for_each_param([&](Param& p) {
      if (p.binding) return;  // claimed by a nested fully_shard, or ignored by one
      if (!o.ignored_params.count(&p)) {
        params.push_back(&p);
        return;
      }
      // NOTE [Ignored parameters] (ignored_param.h): whole on the device, no FSDPParam. A model
      // built on the device keeps the full tensor it has; otherwise it is allocated here.
      Tensor* full = nullptr;
      if (o.device_params) {
        auto it = o.device_params->find(&p);
        if (it != o.device_params->end()) full = &it->second;
      }
      ignored_params_.push_back(std::make_unique<IgnoredParam>(b_, p, full));
      if (full) o.device_params->erase(&p);
    });
  // NOTE [reshard_after_forward defaults]: unset means False for the root and True for
  // every other module (newer FSDP2); an int N reshards to N-rank groups after forward,
  // where N == 1 is False and N == W is True.
  GroupConfig g;
  g.shard_group = o.shard_group ? *o.shard_group : mesh_.shard_group;
  g.shard_dim = o.shard_dim;
  g.gradient_divide_factor = o.gradient_divide_factor;
  g.replicate_group = mesh_.replicate_group;
  g.tp_group = mesh_.tp_group;
  g.mp = o.mp_policy;
  g.offload = o.cpu_offload;
  g.pin_memory = o.pin_memory;
  g.device_params = o.device_params;
  const int world = g.shard_group.size();
  switch (o.reshard_after_forward.kind) {
    case ReshardAfterForward::Kind::kDefault: g.reshard_after_forward = !is_root; break;
    case ReshardAfterForward::Kind::kTrue: g.reshard_after_forward = true; break;
    case ReshardAfterForward::Kind::kFalse: g.reshard_after_forward = false; break;
    case ReshardAfterForward::Kind::kInt: {
      int n = o.reshard_after_forward.n;
      FULLSHARD_CHECK(n >= 1 && world % n == 0,
                      "reshard_after_forward int must divide the shard size");
      g.reshard_after_forward = n > 1;
      g.post_forward_size = (n > 1 && n < world) ? n : 0;
      break;
    }
  }
  if (!params.empty()) {
    // FSDPParamGroup._module_fqn: the modules' names joined by ", ".
    std::string name;
    for (Module* m : modules)
      name += (name.empty() ? "" : ", ") + (m->fqn.empty() ? std::string("root") : m->fqn);
    s->group = std::make_unique<FSDPParamGroup>(b_, comm_, name, params, g);
    // The call's full tensors go when it returns (their last reference, PyTorch frees them).
    if (o.device_params)
      for (Param* p : params) o.device_params->erase(p);
  }
  for (Module* m : modules) by_module_[m] = s.get();
  states_.push_back(std::move(s));
  return *states_.back();
}

FSDPState* FSDPRuntime::state_of(const Module& m) {
  auto it = by_module_.find(&m);
  return it == by_module_.end() ? nullptr : it->second;
}

void FSDPRuntime::lazy_init() {
  if (lazy_inited_) return;
  lazy_inited_ = true;
  // Root first, then the other states in module pre-order (_get_fsdp_states_with_modules).
  FSDPState* root = nullptr;
  for (auto& s : states_)
    if (s->is_root) root = s.get();
  FULLSHARD_CHECK(root != nullptr, "no root fully_shard state");
  std::set<FSDPState*> seen;
  root->module->for_each_module([&](Module& m) {
    if (FSDPState* s = state_of(m); s && !seen.count(s)) {
      seen.insert(s);
      all_states_.push_back(s);
    }
  });
}

Value FSDPRuntime::cast_value(ExecContext& c, Value x, DType to, const std::string& name) {
  if (!x.t || x.t.dtype() == to || x.t.dtype() == DType::kInt64 || x.t.dtype() == DType::kUInt8)
    return x;
  Backend& b = c.backend();
  Tensor y = ops::cast(b, kCurrent, x.t, to, MemCategory::kActivation, name);
  Value out{y, x.requires_grad() && c.recording() ? c.new_id() : 0};
  if (out.id) {
    TensorMeta meta = x.t.meta();
    c.record(Node{name, {x.id}, {out.id}, [&b, meta, name](std::vector<Tensor>& g) {
                    Tensor gx =
                        empty_tensor(b, meta, MemCategory::kTemporary, kCurrent, name + " grad");
                    ops::copy_into(b, kCurrent, gx, g[0], name + " backward");
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

Value FSDPRuntime::pre_forward(ExecContext& c, Module& m, Value x) {
  FSDPState* s = state_of(m);
  if (!s) return x;
  if (s->training_state == TrainingState::kPreBackward) return x;  // AC recompute
  const bool grouped = s->modules.size() > 1;
  if (grouped && s->modules_to_run.empty())
    s->modules_to_run.insert(s->modules.begin(), s->modules.end());
  // One-shot work (root setup, forward prefetch) runs on the first module of a pass; the
  // input cast, the unshard and the post-backward registration on every module's call.
  const bool first_in_pass = s->training_state != TrainingState::kForward;
  if (s->is_root) lazy_init();
  // _root_pre_forward: the first state of a pass with no forward root yet (the root; a
  // chunked loss's standalone output calls after the root's post-forward) becomes the
  // forward root, and the all-gather streams wait for the current stream (for the root: the
  // optimizer step must finish before the first all-gather).
  if (first_in_pass && iter_forward_root_ == nullptr) {
    iter_forward_root_ = s;
    // NOTE [Post-optimizer event]: FSDPModule.set_post_optim_event(event) (_fully_shard.py)
    // stores a user event in the root's _state_ctx; _root_pre_forward (_fsdp_state.py) then makes
    // the copy-in and all-gather streams wait on that event, once, and clears it, instead of
    // wait_stream(current_stream). A training loop records it right after optimizer.step(), so
    // the first all-gathers of the next step no longer wait for what the current stream runs
    // between the step and the forward (here: zero_grad's nothing and the next batch's load),
    // and may overlap it. Without the event each root pre-forward waits on the current stream.
    if (post_optim_event_) {
      b_.wait_event(StreamRole::kAllGatherCopyIn, post_optim_event_);
      b_.wait_event(StreamRole::kAllGather, post_optim_event_);
      post_optim_event_ = 0;
    } else {
      b_.wait_stream(StreamRole::kAllGatherCopyIn, kCurrent);
      b_.wait_stream(StreamRole::kAllGather, kCurrent);
    }
    for (auto& st : states_)  // NOTE [Float8 all-gather] in float8_all_gather.cc
      if (st->group)
        for (FSDPParam* p : st->group->fsdp_params()) p->release_retired_float8_scales();
  }
  s->training_state = TrainingState::kForward;
  if (s->mp.cast_forward_inputs && s->mp.param_dtype)
    x = cast_value(c, std::move(x), *s->mp.param_dtype,
                   (m.fqn.empty() ? "root" : m.fqn) + " cast input");
  if (s->group) {
    s->group->pre_forward();
    // RegisterPostBackwardFunction: post_backward fires once the input's gradient exists. A
    // grouped state registers it once per pass, on its first module's input (NOTE [Grouped
    // units]): a [norm, output] unit's post-backward runs after the norm's backward, not
    // between the output's and the norm's, which would free the norm's weight first.
    if (c.recording() && x.requires_grad() && (!grouped || first_in_pass)) {
      Value out{x.t, c.new_id()};
      FSDPParamGroup* g = s->group.get();
      c.record(
          Node{g->name() + " post_backward", {x.id}, {out.id}, [g](std::vector<Tensor>& grads) {
                 g->post_backward();
                 return std::vector<Tensor>{grads[0]};
               }});
      x = out;
    }
  }
  if (first_in_pass)
    for (FSDPState* t : s->forward_prefetch)
      if (t->group) FSDPParamGroup::prefetch_unshard(*t->group, TrainingState::kForward);
  return x;
}

Value FSDPRuntime::register_pre_backward(ExecContext& c, FSDPState& s, Value y) {
  if (!c.recording() || !y.requires_grad()) return y;
  Value out{y.t, c.new_id()};
  FSDPState* sp = &s;
  std::string name = s.group ? s.group->name() : (s.module->fqn.empty() ? "root" : s.module->fqn);
  c.record(Node{name + " pre_backward", {y.id}, {out.id}, [this, sp](std::vector<Tensor>& grads) {
                  state_pre_backward(*sp);
                  return std::vector<Tensor>{grads[0]};
                }});
  return out;
}

Value FSDPRuntime::force_complete_incomplete_states(ExecContext& c, Value y) {
  // Reverse pre-order, as FSDP2 iterates all_states.
  for (auto it = all_states_.rbegin(); it != all_states_.rend(); ++it) {
    FSDPState* s = *it;
    if (s->is_root || s->modules_to_run.empty()) continue;
    if (s->group) s->group->post_forward();
    y = register_pre_backward(c, *s, std::move(y));
    s->training_state = TrainingState::kIdle;
    if (s->mp.output_dtype)
      y = cast_value(c, std::move(y), *s->mp.output_dtype,
                     s->group ? s->group->name() + " cast output" : "cast output");
    s->modules_to_run.clear();
  }
  return y;
}

Value FSDPRuntime::post_forward(ExecContext& c, Module& m, Value y) {
  FSDPState* s = state_of(m);
  if (!s) return y;
  if (s->training_state == TrainingState::kPreBackward) return y;
  if (s->modules.size() > 1) {
    // Not the last module of the group's pass (or a repeat call, as a chunked loss makes of
    // the output module): only the output dtype cast.
    const bool completes = s->modules_to_run.erase(&m) > 0 && s->modules_to_run.empty();
    if (!completes) {
      if (s->mp.output_dtype)
        y = cast_value(c, std::move(y), *s->mp.output_dtype, m.fqn + " cast output");
      return y;
    }
  }
  if (s->group) s->group->post_forward();
  if (s->is_root) {
    // NOTE [Grouped units] (fully_shard.h): FSDP2 registers the root's pre-backward hook on the
    // output before the forced states' hooks, and tensor hooks run in registration order; here a
    // later wrapper runs earlier in backward, so the forced states are wrapped first (their
    // group post-forwards still run after the root's, as in FSDP2).
    y = force_complete_incomplete_states(c, std::move(y));
  }
  y = register_pre_backward(c, *s, std::move(y));
  s->training_state = TrainingState::kIdle;
  if (iter_forward_root_ == s) iter_forward_root_ = nullptr;
  if (s->is_root && comm_.all_gather_state) {
    b_.wait_event(StreamRole::kAllGatherCopyIn, comm_.all_gather_state->event);
    b_.wait_event(StreamRole::kAllGather, comm_.all_gather_state->event);
    comm_.all_gather_state.reset();
  }
  if (s->mp.output_dtype)
    y = cast_value(c, std::move(y), *s->mp.output_dtype,
                   (m.fqn.empty() ? "root" : m.fqn) + " cast output");
  return y;
}

void FSDPRuntime::state_pre_backward(FSDPState& s) {
  s.training_state = TrainingState::kPreBackward;
  if (!s.group) return;
  // FSDPState._pre_backward: the implicit prefetch unless the list names some state.
  const bool default_prefetch = !s.backward_prefetch || s.backward_prefetch->empty();
  s.group->pre_backward(default_prefetch);
  if (!default_prefetch)
    for (FSDPState* t : *s.backward_prefetch)
      if (t->group) FSDPParamGroup::prefetch_unshard(*t->group, TrainingState::kPreBackward);
}

void FSDPRuntime::post_backward_final_callback() {
  iter_forward_root_ = nullptr;
  for (FSDPState* s : all_states_) {
    if (s->group && s->group->training_state() != TrainingState::kPostBackward)
      s->group->post_backward();
    s->training_state = TrainingState::kIdle;
    if (!is_last_backward_) continue;
    s->modules_to_run.clear();
    if (s->group) s->group->finalize_backward();
  }
  if (!is_last_backward_) return;
  comm_.post_forward_order.clear();
  if (comm_.reduce_scatter_state) {
    b_.wait_event(kCurrent, comm_.reduce_scatter_state->event);
    comm_.reduce_scatter_state.reset();
  }
}

void FSDPRuntime::reset_iter_state() {
  iter_forward_root_ = nullptr;
  for (auto& s : states_) {
    s->modules_to_run.clear();
    s->training_state = TrainingState::kIdle;
  }
}

// NOTE [Forward methods]: FSDP2 all-gathers a module's parameters in the pre-forward hook of
// nn.Module.__call__, so a method other than forward called directly (model.generate(...),
// vit.forward_features(...)) finds the module's own parameters sharded: PyTorch then fails on
// the first op that mixes the sharded DTensor parameter with a plain tensor. Submodules it calls
// as modules still run their own hooks. register_fsdp_forward_method(module, name)
// (torch/distributed/fsdp/_fully_shard/_fully_shard.py at pytorch/pytorch@1d2fbd40) replaces
// the method by one that runs FSDPState._pre_forward before it and _post_forward after it, as
// forward's hooks do; for a module that is not an FSDPModule it is a no-op. Here the registered
// (module, method) pairs are kept and ExecContext::call_method runs the method through
// call_module when its pair is registered; without it, an op reading a parameter of the
// module's group fails (param_tensor: "used while sharded"), naming the fix.
bool FSDPRuntime::is_forward_method(const Module& m, const std::string& method) const {
  return forward_methods_.count({&m, method}) > 0;
}

void FSDPRuntime::register_fsdp_forward_method(Module& m, const std::string& method) {
  if (!by_module_.count(&m)) return;  // not an FSDPModule: a no-op, as in FSDP2
  forward_methods_.insert({&m, method});
}

std::optional<UnshardHandle> FSDPRuntime::unshard(FSDPState& s, bool async_op) {
  FSDPParamGroup* g = s.group.get();
  if (g) g->unshard(async_op);
  UnshardHandle handle(g);
  if (async_op) return handle;
  handle.wait();
  return std::nullopt;
}

void FSDPRuntime::reshard(FSDPState& s) {
  if (s.group) s.group->reshard();
}

void FSDPRuntime::set_requires_gradient_sync(bool sync) {
  for (auto& s : states_)
    if (s->group) s->group->set_requires_gradient_sync(sync);
}

void FSDPRuntime::perform_reduce_grad() {
  set_is_last_backward(true);
  set_reshard_after_backward(true);
  set_requires_gradient_sync(true);
  for (FSDPState* s : all_states_)
    if (s->group) s->group->post_backward();
  post_backward_final_callback();
}

void FSDPRuntime::set_reshard_after_backward(bool reshard) {
  for (auto& s : states_)
    if (s->group) s->group->set_reshard_after_backward(reshard);
}

void FSDPRuntime::set_requires_all_reduce(bool all_reduce) {
  for (auto& s : states_)
    if (s->group) s->group->set_requires_all_reduce(all_reduce);
}

void FSDPRuntime::set_gradient_divide_factor(double factor) {
  for (auto& s : states_)
    if (s->group) s->group->set_gradient_divide_factor(factor);
}

void FSDPRuntime::set_force_sum_reduction_for_comms(bool enable) {
  for (auto& s : states_)
    if (s->group) s->group->set_force_sum_reduction_for_comms(enable);
}

void FSDPRuntime::set_unshard_async_op(bool async_op) {
  for (auto& s : states_)
    if (s->group) s->group->set_unshard_async_op(async_op);
}

}  // namespace fullshard
