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
  FULLSHARD_CHECK(!by_module_.count(&module), "fully_shard called twice on '" + module.fqn + "'");
  auto s = std::make_unique<FSDPState>();
  s->module = &module;
  s->is_root = is_root;
  s->mp = o.mp_policy;
  std::vector<Param*> params;
  module.for_each_param([&](Param& p) {
    if (!p.binding) params.push_back(&p);  // not claimed by a nested fully_shard
  });
  // NOTE [reshard_after_forward defaults]: unset means False for the root and True for
  // every other module (newer FSDP2); an int N reshards to N-rank groups after forward,
  // where N == 1 is False and N == W is True.
  GroupConfig g;
  g.shard_group = mesh_.shard_group;
  g.replicate_group = mesh_.replicate_group;
  g.tp_group = mesh_.tp_group;
  g.mp = o.mp_policy;
  g.offload = o.cpu_offload;
  const int world = mesh_.shard_group.size();
  switch (o.reshard_after_forward.kind) {
    case ReshardAfterForward::Kind::kDefault: g.reshard_after_forward = !is_root; break;
    case ReshardAfterForward::Kind::kTrue: g.reshard_after_forward = true; break;
    case ReshardAfterForward::Kind::kFalse: g.reshard_after_forward = false; break;
    case ReshardAfterForward::Kind::kInt: {
      int n = o.reshard_after_forward.n;
      FULLSHARD_CHECK(n >= 1 && world % n == 0, "reshard_after_forward int must divide the shard size");
      g.reshard_after_forward = n > 1;
      g.post_forward_size = (n > 1 && n < world) ? n : 0;
      break;
    }
  }
  if (!params.empty()) {
    std::string name = module.fqn.empty() ? "root" : module.fqn;
    s->group = std::make_unique<FSDPParamGroup>(b_, comm_, name, std::move(params), g);
  }
  by_module_[&module] = s.get();
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
  if (!x.t || x.t.dtype() == to || x.t.dtype() == DType::kInt64 || x.t.dtype() == DType::kUInt8) return x;
  Backend& b = c.backend();
  Tensor y = ops::cast(b, kCurrent, x.t, to, MemCategory::kActivation, name);
  Value out{y, x.requires_grad() && c.recording() ? c.new_id() : 0};
  if (out.id) {
    TensorMeta meta = x.t.meta();
    c.record(Node{name, {x.id}, {out.id}, [&b, meta, name](std::vector<Tensor>& g) {
                    Tensor gx = Tensor::empty(b, meta, MemCategory::kTemporary, kCurrent, name + " grad");
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
  if (s->is_root) {
    lazy_init();
    // _root_pre_forward: the optimizer step must finish before the first all-gather.
    b_.wait_stream(StreamRole::kAllGatherCopyIn, kCurrent);
    b_.wait_stream(StreamRole::kAllGather, kCurrent);
  }
  s->training_state = TrainingState::kForward;
  if (s->mp.cast_forward_inputs && s->mp.param_dtype)
    x = cast_value(c, std::move(x), *s->mp.param_dtype, (m.fqn.empty() ? "root" : m.fqn) + " cast input");
  if (s->group) {
    s->group->pre_forward();
    // RegisterPostBackwardFunction: post_backward fires once the input's gradient exists.
    if (c.recording() && x.requires_grad()) {
      Value out{x.t, c.new_id()};
      FSDPParamGroup* g = s->group.get();
      c.record(Node{g->name() + " post_backward", {x.id}, {out.id}, [g](std::vector<Tensor>& grads) {
                      g->post_backward();
                      return std::vector<Tensor>{grads[0]};
                    }});
      x = out;
    }
  }
  for (FSDPState* t : s->forward_prefetch)
    if (t->group) FSDPParamGroup::prefetch_unshard(*t->group, TrainingState::kForward);
  return x;
}

Value FSDPRuntime::post_forward(ExecContext& c, Module& m, Value y) {
  FSDPState* s = state_of(m);
  if (!s) return y;
  if (s->training_state == TrainingState::kPreBackward) return y;
  if (s->group) s->group->post_forward();
  // Pre-backward hook on the output.
  if (c.recording() && y.requires_grad()) {
    Value out{y.t, c.new_id()};
    c.record(Node{(m.fqn.empty() ? "root" : m.fqn) + " pre_backward", {y.id}, {out.id},
                  [this, s](std::vector<Tensor>& grads) {
                    state_pre_backward(*s);
                    return std::vector<Tensor>{grads[0]};
                  }});
    y = out;
  }
  s->training_state = TrainingState::kIdle;
  if (s->is_root && comm_.all_gather_state) {
    b_.wait_event(StreamRole::kAllGatherCopyIn, comm_.all_gather_state->event);
    b_.wait_event(StreamRole::kAllGather, comm_.all_gather_state->event);
    comm_.all_gather_state.reset();
  }
  if (s->mp.output_dtype)
    y = cast_value(c, std::move(y), *s->mp.output_dtype, (m.fqn.empty() ? "root" : m.fqn) + " cast output");
  return y;
}

void FSDPRuntime::state_pre_backward(FSDPState& s) {
  s.training_state = TrainingState::kPreBackward;
  if (!s.group) return;
  bool default_prefetch = !s.backward_prefetch.has_value();
  s.group->pre_backward(default_prefetch);
  if (!default_prefetch)
    for (FSDPState* t : *s.backward_prefetch)
      if (t->group) FSDPParamGroup::prefetch_unshard(*t->group, TrainingState::kPreBackward);
}

void FSDPRuntime::post_backward_final_callback() {
  for (FSDPState* s : all_states_) {
    if (s->group && s->group->training_state() != TrainingState::kPostBackward) s->group->post_backward();
    s->training_state = TrainingState::kIdle;
    if (s->group) s->group->finalize_backward();
  }
  comm_.post_forward_order.clear();
  if (comm_.reduce_scatter_state) {
    b_.wait_event(kCurrent, comm_.reduce_scatter_state->event);
    comm_.reduce_scatter_state.reset();
  }
}

void FSDPRuntime::set_requires_gradient_sync(bool sync) {
  for (auto& s : states_)
    if (s->group) s->group->set_requires_gradient_sync(sync);
}

}  // namespace fullshard
