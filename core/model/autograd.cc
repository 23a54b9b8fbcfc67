#include "core/model/autograd.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/model/ops.h"

namespace fullshard {

ExecContext::ExecContext(Backend& backend, Graph* graph, ModuleHooks* hooks)
    : backend_(&backend), graph_(graph), hooks_(hooks), next_id_(std::make_shared<uint64_t>(0)) {}

ExecContext ExecContext::with_graph(Graph* graph, SacState* sac) const {
  ExecContext c = *this;
  c.graph_ = graph;
  c.sac_ = sac;
  return c;
}

void ExecContext::record(Node node) {
  if (graph_) graph_->add(std::move(node));
}

// NOTE [Module arguments live until the call returns]: in `self.feed_forward(self.ffn_norm(h))`
// the norm's output is referenced by the argument tuple of nn.Module.__call__ (and by
// forward's parameter `x`) until the call returns, post-forward hooks included: it is not
// freed after its last use inside forward (w3), even when nothing saves it (a checkpointed
// block's first forward). The same holds for a pre-forward hook's replacement arguments.
// `arg` and `hooked_arg` below are those references.
Value ExecContext::call_module(Module& m, Value x,
                               const std::function<Value(ExecContext&, Value)>& fn) {
  const Value arg = x;
  if (hooks_) x = hooks_->pre_forward(*this, m, std::move(x));
  const Value hooked_arg = x;
  Value y = fn(*this, std::move(x));
  if (hooks_) y = hooks_->post_forward(*this, m, std::move(y));
  return y;
}

Value ExecContext::call_method(Module& m, const std::string& method, Value x,
                               const std::function<Value(ExecContext&, Value)>& fn) {
  if (hooks_ && hooks_->is_forward_method(m, method)) return call_module(m, std::move(x), fn);
  return fn(*this, std::move(x));
}

// NOTE [Gradient accumulation at a value]: when a second gradient reaches a value (a
// residual stream feeds two branches), PyTorch's InputBuffer adds in place if it holds the
// only reference to the first gradient, and out of place otherwise.
static void accumulate(Backend& b, std::map<uint64_t, Tensor>& grads, uint64_t id, Tensor g) {
  if (id == 0 || !g) return;
  auto it = grads.find(id);
  if (it == grads.end()) {
    grads.emplace(id, std::move(g));
    return;
  }
  Tensor& old = it->second;
  if (old.unique() && old.storage() != g.storage()) {
    ops::add_into(b, old, g, "grad accumulate");
  } else {
    Tensor sum = ops::add_new(b, old, g, MemCategory::kTemporary, "grad accumulate");
    old = std::move(sum);
  }
}

namespace {
// Autograd runs a CUDA backward on its device thread (NOTE [cuBLAS workspaces]).
class OnAutogradThread {
 public:
  explicit OnAutogradThread(Backend& b)
      : b_(b), previous_(b.set_host_thread(HostThread::kAutograd)) {}
  ~OnAutogradThread() { b_.set_host_thread(previous_); }
  OnAutogradThread(const OnAutogradThread&) = delete;
  OnAutogradThread& operator=(const OnAutogradThread&) = delete;

 private:
  Backend& b_;
  HostThread previous_;
};
}  // namespace

namespace {
// The weight parts a Graph::backward_input on this thread keeps, and the node it runs.
struct SplitScope {
  std::vector<DeferredWeightGrad>* deferred = nullptr;
  size_t node = 0;
};
thread_local SplitScope* t_split = nullptr;

class SplitGuard {
 public:
  explicit SplitGuard(SplitScope* s) : previous_(t_split) { t_split = s; }
  ~SplitGuard() { t_split = previous_; }
  SplitGuard(const SplitGuard&) = delete;
  SplitGuard& operator=(const SplitGuard&) = delete;

 private:
  SplitScope* previous_;
};

// Runs `node` on the gradients of its outputs found in `grads` (taken out of it) and adds its
// input gradients there; false when no gradient reached it (PyTorch would not run it either).
bool run_node(Backend& b, Node& node, std::map<uint64_t, Tensor>& grads) {
  std::vector<Tensor> outs;
  bool any = false;
  for (uint64_t o : node.outputs) {
    auto it = grads.find(o);
    if (it != grads.end()) {
      outs.push_back(std::move(it->second));
      grads.erase(it);
      any = true;
    } else {
      outs.emplace_back();
    }
  }
  if (!any) return false;
  std::vector<Tensor> ins = node.backward(outs);
  outs.clear();  // the outputs' gradients die here unless passed on
  FULLSHARD_CHECK(ins.size() == node.inputs.size(),
                  "node '" + node.name + "' returned " + std::to_string(ins.size()) + " grads");
  for (size_t k = 0; k < ins.size(); ++k) accumulate(b, grads, node.inputs[k], std::move(ins[k]));
  return true;
}
}  // namespace

void weight_gradients(const Param* param, std::vector<Tensor> grads,
                      std::function<void(const std::vector<Tensor>&)> fn) {
  if (!t_split) {
    fn(grads);
    return;
  }
  t_split->deferred->push_back({t_split->node, param, std::move(grads), std::move(fn)});
}

bool weight_gradients_deferred() { return t_split != nullptr; }

Tensor Graph::backward(Backend& backend, uint64_t root, Tensor seed, uint64_t want) {
  const OnAutogradThread on_autograd_thread(backend);
  FULLSHARD_CHECK(deferred_.empty(), "a full backward of a graph whose input backward ran");
  std::map<uint64_t, Tensor> grads;
  grads.emplace(root, std::move(seed));
  Tensor wanted;
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node node = std::move(nodes_[i]);
    nodes_.pop_back();
    run_node(backend, node, grads);
    node.backward = nullptr;  // release saved tensors now
  }
  kept_.clear();  // NOTE [Kept until backward ends]
  if (want) {
    auto it = grads.find(want);
    if (it != grads.end()) wanted = std::move(it->second);
  }
  return wanted;
}

Tensor Graph::backward_input(Backend& backend, uint64_t root, Tensor seed, uint64_t want) {
  const OnAutogradThread on_autograd_thread(backend);
  FULLSHARD_CHECK(deferred_.empty(), "a second input backward of one graph");
  std::map<uint64_t, Tensor> grads;
  grads.emplace(root, std::move(seed));
  SplitScope scope{&deferred_, 0};
  {
    const SplitGuard split(&scope);
    // retain_graph=True: every node stays, with what it saved.
    for (size_t i = nodes_.size(); i-- > 0;) {
      scope.node = i;
      run_node(backend, nodes_[i], grads);
    }
  }
  kept_.clear();
  // The stage output's detach_: nothing holds the nodes above the topmost intermediate.
  size_t keep = 0;
  for (const DeferredWeightGrad& d : deferred_) keep = std::max(keep, d.node + 1);
  while (nodes_.size() > keep) nodes_.pop_back();
  Tensor wanted;
  if (want) {
    auto it = grads.find(want);
    if (it != grads.end()) wanted = std::move(it->second);
  }
  return wanted;
}

void Graph::backward_weight(Backend& backend, const std::vector<const Param*>& param_order) {
  const OnAutogradThread on_autograd_thread(backend);
  std::map<const Param*, size_t> position;
  for (size_t i = 0; i < param_order.size(); ++i) position.emplace(param_order[i], i);
  auto at = [&](const DeferredWeightGrad& d) {
    auto it = position.find(d.param);
    return it == position.end() ? param_order.size() : it->second;
  };
  std::stable_sort(deferred_.begin(), deferred_.end(),
                   [&](const DeferredWeightGrad& a, const DeferredWeightGrad& b) {
                     return at(a) < at(b);
                   });
  for (DeferredWeightGrad& d : deferred_) {
    d.run(d.grads);
    d.run = nullptr;  // retain_graph=False: the intermediate's saved tensors go
    if (d.node < nodes_.size()) nodes_[d.node].backward = nullptr;
  }
  deferred_.clear();  // the param groups, with their captured gradients
  nodes_.clear();     // and the rest of the graph
}

Value checkpoint(ExecContext& c, Value x, std::function<Value(ExecContext&, Value)> fn,
                 bool op_level_sac, const std::string& name, bool params_require_grad) {
  auto sac = op_level_sac ? std::make_shared<SacState>() : nullptr;
  ExecContext fwd = c.with_graph(nullptr, sac.get());
  Value y = fn(fwd, Value{x.t, 0});
  if (!c.recording() || !(x.requires_grad() || params_require_grad)) return Value{y.t, 0};
  Value out{y.t, c.new_id()};
  Node n;
  n.name = name + " checkpoint";
  n.inputs = {x.id};
  n.outputs = {out.id};
  Tensor saved_x = x.t;
  ExecContext base = c;
  n.backward = [base, saved_x, fn, sac, x_rg = x.requires_grad()](std::vector<Tensor>& g) mutable {
    Graph sub;
    if (sac) {
      sac->mode = SacState::Mode::kRecompute;
      sac->mm_count = 0;
      sac->next = 0;
    }
    ExecContext rc = base.with_graph(&sub, sac.get());
    Value xin{saved_x, x_rg ? rc.new_id() : 0};
    Value yr = fn(rc, xin);
    if (sac) sac->cache.clear();  // cached outputs now live only in the recomputed graph
    uint64_t yid = yr.id;
    yr.t = Tensor();  // the recomputed output itself is not needed
    xin.t = Tensor();
    saved_x = Tensor();
    return std::vector<Tensor>{sub.backward(base.backend(), yid, std::move(g[0]), xin.id)};
  };
  c.record(std::move(n));
  return out;
}

}  // namespace fullshard
