#include "core/model/autograd.h"

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

Tensor Graph::backward(Backend& backend, uint64_t root, Tensor seed, uint64_t want) {
  const OnAutogradThread on_autograd_thread(backend);
  std::map<uint64_t, Tensor> grads;
  grads.emplace(root, std::move(seed));
  Tensor wanted;
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node node = std::move(nodes_[i]);
    nodes_.pop_back();
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
    if (!any) continue;  // not reachable from the root: PyTorch would not run it either
    std::vector<Tensor> ins = node.backward(outs);
    outs.clear();  // the outputs' gradients die here unless passed on
    FULLSHARD_CHECK(ins.size() == node.inputs.size(),
                    "node '" + node.name + "' returned " + std::to_string(ins.size()) + " grads");
    for (size_t k = 0; k < ins.size(); ++k)
      accumulate(backend, grads, node.inputs[k], std::move(ins[k]));
    node.backward = nullptr;  // release saved tensors now
  }
  kept_.clear();  // NOTE [Kept until backward ends]
  if (want) {
    auto it = grads.find(want);
    if (it != grads.end()) wanted = std::move(it->second);
  }
  return wanted;
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
