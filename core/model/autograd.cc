#include "core/model/autograd.h"

#include <algorithm>
#include <memory>

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
// Set while Graph::run_weight_part replays a node for its weight part alone.
thread_local bool t_weight_only = false;

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
  if (!t_split || t_weight_only) {
    fn(grads);
    return;
  }
  t_split->deferred->push_back({t_split->node, param, std::move(grads), std::move(fn)});
}

bool weight_gradients_deferred() { return t_split != nullptr || t_weight_only; }

bool input_gradients_wanted() { return !t_weight_only; }

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
    // retain_graph=False: the intermediate's saved tensors go. A checkpointed block's part
    // (!releases_node) keeps its block: the copies W's recomputes made for ops W never runs
    // stay while any node of the stage's graph holds their holders, until W ends (NOTE [Split
    // backward of a checkpointed block]).
    if (d.releases_node) d.run = nullptr;
    if (d.releases_node && d.node < nodes_.size()) nodes_[d.node].backward = nullptr;
  }
  deferred_.clear();  // the param groups, with their captured gradients
  nodes_.clear();     // and the rest of the graph
}

Tensor Graph::backward_input_recomputed(Backend& backend, uint64_t root, Tensor seed, uint64_t want,
                                        std::vector<DeferredWeightGrad>& weights) {
  std::map<uint64_t, Tensor> grads;
  grads.emplace(root, std::move(seed));
  std::vector<DeferredWeightGrad> parts;
  SplitScope scope{&parts, 0};
  const SplitGuard split(&scope);
  for (size_t i = nodes_.size(); i-- > 0;) {
    scope.node = i;
    if (!run_node(backend, nodes_[i], grads)) continue;  // keeps what it saved
    nodes_[i].backward = nullptr;                        // the tensors it unpacked go with the call
    FULLSHARD_CHECK(parts.size() <= 1, "node '" + nodes_[i].name + "' has two weight parts");
    for (DeferredWeightGrad& p : parts) {
      p.run = nullptr;  // its weight part is recomputed at W
      weights.push_back(std::move(p));
    }
    parts.clear();
  }
  Tensor wanted;
  if (want) {
    auto it = grads.find(want);
    if (it != grads.end()) wanted = std::move(it->second);
  }
  return wanted;
}

namespace {
class WeightOnlyGuard {
 public:
  WeightOnlyGuard() : previous_(t_weight_only) { t_weight_only = true; }
  ~WeightOnlyGuard() { t_weight_only = previous_; }
  WeightOnlyGuard(const WeightOnlyGuard&) = delete;
  WeightOnlyGuard& operator=(const WeightOnlyGuard&) = delete;

 private:
  bool previous_;
};
}  // namespace

void Graph::run_weight_part(size_t i, std::vector<Tensor> grads) {
  FULLSHARD_CHECK(i < nodes_.size() && nodes_[i].backward,
                  "a weight part replayed on a node that saved nothing");
  const SplitGuard no_split(nullptr);
  const WeightOnlyGuard weight_only;
  nodes_[i].backward(grads);  // its input part skipped, its weight part run on `grads`
}

namespace {
// NOTE [Split backward of a checkpointed block]: a zero-bubble schedule's I and W over a block
// under non-reentrant torch.utils.checkpoint (torchtitan's apply_ac), as PyTorch runs them
// (torch/utils/checkpoint.py at pytorch/pytorch@0008d771: _checkpoint_hook, _recomputation_hook;
// torch/distributed/pipelining/_backward.py at pytorch/pytorch@2e0f976a). The block saves
// holders; an unpack recomputes the block once per autograd graph task and keeps a copy per
// holder and task until that node unpacks it or the holder goes (its node's variables released).
// - I, one task with retain_graph=True, recomputes the block; every node that runs unpacks, so
//   frees, all it saved: past I the block keeps only its weight ops' output gradients (the
//   prehooks' captures) and the checkpoint's saved input (until the graph goes).
// - W runs an autograd.grad, a new task, per param group in parameters() order: each recomputes
//   the block again; the group's op computes its weight gradient and releases its variables (its
//   copies in every task go), while the copies held for ops W never runs (attention, the
//   activations) stay until the graph goes at W's end.
// RecomputedBlock keeps each task's recomputed graph. Op-level SAC is refused: its cache is spent
// at I, and PyTorch raises at W's recompute.
struct RecomputedBlock {
  ExecContext base;
  Tensor x;  // the checkpoint's saved input (_NoopSaveInputs), until the graph goes
  std::function<Value(ExecContext&, Value)> fn;
  bool x_requires_grad = false;
  std::vector<std::unique_ptr<Graph>> copies;  // each task's recomputed graph
  std::vector<bool> released;                  // per node: its saved variables released

  // The recompute's own graph holds everything it saved until the recompute returns; then only
  // the copies of holders still alive stay.
  std::unique_ptr<Graph> recompute(uint64_t& yid, uint64_t& xid) {
    auto sub = std::make_unique<Graph>();
    ExecContext rc = base.with_graph(sub.get(), nullptr);
    Value xin{x, x_requires_grad ? rc.new_id() : 0};
    yid = fn(rc, xin).id;  // the recomputed output itself is not needed
    xid = xin.id;
    for (size_t i = 0; i < released.size(); ++i)
      if (released[i]) sub->release_saved(i);
    return sub;
  }

  void weight(size_t node, const std::vector<Tensor>& grads) {
    uint64_t yid = 0, xid = 0;
    copies.push_back(recompute(yid, xid));
    copies.back()->run_weight_part(node, grads);
    for (auto& c : copies) c->release_saved(node);
    if (node < released.size()) released[node] = true;
  }
};

std::vector<Tensor> checkpoint_backward_input(const ExecContext& base, const Tensor& x,
                                              const std::function<Value(ExecContext&, Value)>& fn,
                                              bool x_requires_grad, Tensor g) {
  SplitScope* outer = t_split;
  auto block = std::make_shared<RecomputedBlock>(RecomputedBlock{base, x, fn, x_requires_grad});
  uint64_t yid = 0, xid = 0;
  std::unique_ptr<Graph> sub = block->recompute(yid, xid);
  std::vector<DeferredWeightGrad> weights;
  Tensor gx = sub->backward_input_recomputed(base.backend(), yid, std::move(g), xid, weights);
  block->released.assign(sub->size(), false);
  block->copies.push_back(std::move(sub));
  for (DeferredWeightGrad& w : weights) {
    const size_t node = w.node;
    outer->deferred->push_back(
        {outer->node, w.param, std::move(w.grads),
         [block, node](const std::vector<Tensor>& go) { block->weight(node, go); }, false});
  }
  return {std::move(gx)};
}
}  // namespace

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
    if (t_split) {  // NOTE [Split backward of a checkpointed block]
      FULLSHARD_CHECK(!sac, "op-level SAC under a split backward (refused by the scenario)");
      return checkpoint_backward_input(base, saved_x, fn, x_rg, std::move(g[0]));
    }
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
