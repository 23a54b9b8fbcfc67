#pragma once
// A small eager autograd: forward ops record nodes that hold the tensors they save for
// backward; backward runs the nodes in reverse creation order (PyTorch's engine order for
// a single device), accumulates gradients per value, and frees saved tensors as each node
// finishes (retain_graph=False). Memory therefore follows PyTorch eager's lifetimes.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/module.h"

namespace fullshard {

// A tensor flowing through the model with its autograd identity (id 0: no grad needed).
struct Value {
  Tensor t;
  uint64_t id = 0;
  bool requires_grad() const { return id != 0; }
};

struct Node {
  std::string name;
  std::vector<uint64_t> inputs;   // value ids that receive gradients (0: none)
  std::vector<uint64_t> outputs;  // value ids whose gradients this node consumes
  // Gets the outputs' gradients (empty Tensor where none arrived), returns one gradient per
  // input (empty Tensor for none). Captured tensors are the node's saved tensors.
  std::function<std::vector<Tensor>(std::vector<Tensor>&)> backward;
};

// NOTE [Split backward]: the zero-bubble schedules run a stage's backward as I then W, as
// torch/distributed/pipelining/_backward.py does. stage_backward_input runs autograd.grad to the
// stage inputs only, with retain_graph=True, after hooking the "intermediates" (the ops whose
// inputs lead to a weight: a linear's mm, a norm) to capture their output gradients; then it
// detaches the stage output, which frees the part of the graph above the topmost intermediate.
// stage_backward_weight later runs autograd.grad from each intermediate (seeded with its
// captured gradient) to the weights, one param group at a time in the stage's parameters()
// order, retain_graph=False: an intermediate's saved tensors go once its weight gradient ran,
// the captured gradients with the param groups at its end, the rest of the graph then too.
// Here Graph::backward_input runs every node's input part and keeps, per node with weights, its
// weight part and output gradients (weight_gradients below), and every node reached (the
// retained graph) up to the last such node; Graph::backward_weight runs the kept parts in the
// parameters' order, releasing each part's node after it, then everything. A checkpointed
// block keeps none of what it saved past I and recomputes at each W (NOTE [Split backward of a
// checkpointed block] in autograd.cc).
struct DeferredWeightGrad {
  size_t node = 0;               // the node (intermediate) whose weight gradients these are
  const Param* param = nullptr;  // its first weight, for the parameters() order
  std::vector<Tensor> grads;     // its output gradients, held until backward_weight ends
  std::function<void(const std::vector<Tensor>&)> run;  // the weight gradients from `grads`
  // false for a weight op inside a checkpointed block: `node` is the checkpoint, whose saved
  // input lives until the graph goes (NOTE [Split backward of a checkpointed block]).
  bool releases_node = true;
};

// Called inside a node's backward: runs `fn(grads)` now, or, within Graph::backward_input,
// keeps both for Graph::backward_weight (`param`: the first weight `fn` accumulates into).
void weight_gradients(const Param* param, std::vector<Tensor> grads,
                      std::function<void(const std::vector<Tensor>&)> fn);
// Whether a node's backward runs inside Graph::backward_input (a fused kernel that would compute
// both parts runs its input part only), or replays its weight part alone.
bool weight_gradients_deferred();
// False while a checkpointed block's W replays a weight op's backward for its weight part alone
// (NOTE [Split backward of a checkpointed block] in autograd.cc): the op skips its input part.
bool input_gradients_wanted();

class Graph {
 public:
  void add(Node node) { nodes_.push_back(std::move(node)); }
  size_t size() const { return nodes_.size(); }
  // Runs backward from `root` seeded with `seed`; returns the gradient that reached
  // `want` (0: none wanted). Nodes are released as they run.
  Tensor backward(Backend& backend, uint64_t root, Tensor seed, uint64_t want = 0);
  // The input gradients only (I), keeping the weight parts (NOTE [Split backward]).
  Tensor backward_input(Backend& backend, uint64_t root, Tensor seed, uint64_t want);
  // The kept weight parts (W), ordered by `param_order` (the stage's parameters() order);
  // the graph is empty afterwards.
  void backward_weight(Backend& backend, const std::vector<const Param*>& param_order);
  size_t deferred_weight_grads() const { return deferred_.size(); }
  // NOTE [Kept until backward ends]: a tensor the training loop still references while
  // backward runs (HF's model output holding the logits); freed when backward returns.
  void keep_until_backward_ends(Tensor t) { kept_.push_back(std::move(t)); }

  // A checkpointed block's recomputed graph under a split backward (NOTE [Split backward of a
  // checkpointed block] in autograd.cc). I over it: each node that runs frees what it saved (its
  // unpacked tensors) and hands its weight part's output gradients to `weights` (node index,
  // weight, gradients) without the part itself; nodes no gradient reached keep what they saved.
  Tensor backward_input_recomputed(Backend& backend, uint64_t root, Tensor seed, uint64_t want,
                                   std::vector<DeferredWeightGrad>& weights);
  // The weight part alone of node `i`, from the output gradients `grads`.
  void run_weight_part(size_t i, std::vector<Tensor> grads);
  // Frees what node `i` saved (its saved variables released).
  void release_saved(size_t i) {
    if (i < nodes_.size()) nodes_[i].backward = nullptr;
  }

 private:
  std::vector<Node> nodes_;
  std::vector<Tensor> kept_;
  std::vector<DeferredWeightGrad> deferred_;  // from backward_input
};

// Op-level selective activation checkpointing state for one checkpointed region
// (torchtitan _apply_op_sac): in forward the outputs of chosen ops are cached; in the
// recompute those ops return the cached outputs instead of running.
struct SacState {
  enum class Mode { kForward, kRecompute } mode = Mode::kForward;
  int mm_count = 0;
  size_t next = 0;
  std::vector<std::vector<Tensor>> cache;  // per saved op, its outputs, in op order
};

class ExecContext;
class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual Value pre_forward(ExecContext& c, Module& m, Value x) = 0;
  virtual Value post_forward(ExecContext& c, Module& m, Value y) = 0;
  // Whether `m.method(...)` runs the forward hooks as forward does (FSDP2's
  // register_fsdp_forward_method). No hooks run around other methods by default.
  virtual bool is_forward_method(const Module& m, const std::string& method) const {
    return false;
  }
};

// What model code runs against: the backend, the graph being recorded (null while a
// checkpointed region runs its first forward: nothing is saved), the module hooks (FSDP).
class ExecContext {
 public:
  ExecContext(Backend& backend, Graph* graph, ModuleHooks* hooks);
  Backend& backend() const { return *backend_; }
  bool recording() const { return graph_ != nullptr; }
  Graph* graph() const { return graph_; }
  ModuleHooks* hooks() const { return hooks_; }
  SacState* sac() const { return sac_; }
  uint64_t new_id() { return ++*next_id_; }
  // A context sharing this one's ids and hooks but recording into `graph` (may be null).
  ExecContext with_graph(Graph* graph, SacState* sac) const;

  // Records a node if recording; marks outputs as requiring grad when any input does.
  // Returns the ids given to the outputs (0 when no grad is needed).
  void record(Node node);

  // nn.Module.__call__: hooks around fn.
  Value call_module(Module& m, Value x, const std::function<Value(ExecContext&, Value)>& fn);
  // m.method(x), a method other than forward: fn alone, or with the forward hooks around it
  // when the hooks registered it (NOTE [Forward methods] in core/fsdp/fully_shard.cc).
  Value call_method(Module& m, const std::string& method, Value x,
                    const std::function<Value(ExecContext&, Value)>& fn);

  Tensor empty(TensorMeta meta, MemCategory cat, std::string_view what) const {
    return empty_tensor(*backend_, std::move(meta), cat, StreamRole::kDefault, what);
  }
  void launch(const OpCall& op) const { backend_->launch(StreamRole::kDefault, op); }

 private:
  Backend* backend_;
  Graph* graph_;
  ModuleHooks* hooks_;
  SacState* sac_ = nullptr;
  std::shared_ptr<uint64_t> next_id_;
};

// Activation checkpointing of a region (torch.utils.checkpoint, non-reentrant): the first
// forward saves nothing but the region's input (and, with `sac`, the cached op outputs);
// backward recomputes the region, then backpropagates through the recomputed graph.
// `params_require_grad`: some parameter the region reads requires grad, so its output does
// even when x does not (a LoRA block after a frozen embedding).
Value checkpoint(ExecContext& c, Value x, std::function<Value(ExecContext&, Value)> fn,
                 bool op_level_sac, const std::string& name, bool params_require_grad = true);

}  // namespace fullshard
