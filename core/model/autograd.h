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

class Graph {
 public:
  void add(Node node) { nodes_.push_back(std::move(node)); }
  size_t size() const { return nodes_.size(); }
  // Runs backward from `root` seeded with `seed`; returns the gradient that reached
  // `want` (0: none wanted). Nodes are released as they run.
  Tensor backward(Backend& backend, uint64_t root, Tensor seed, uint64_t want = 0);
  // NOTE [Kept until backward ends]: a tensor the training loop still references while
  // backward runs (HF's model output holding the logits); freed when backward returns.
  void keep_until_backward_ends(Tensor t) { kept_.push_back(std::move(t)); }

 private:
  std::vector<Node> nodes_;
  std::vector<Tensor> kept_;
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

  Tensor empty(TensorMeta meta, MemCategory cat, std::string_view what) const {
    return Tensor::empty(*backend_, std::move(meta), cat, StreamRole::kDefault, what);
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
