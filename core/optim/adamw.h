#pragma once
// AdamW over the sharded fp32 parameters (torch.optim.AdamW), and gradient-norm clipping
// across shards (torch.nn.utils.clip_grad_norm_ on DTensor gradients).
#include <vector>

#include "core/mesh/mesh_info.h"
#include "core/model/optimizer_param.h"

namespace fullshard {

struct AdamWOptions {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  // foreach (PyTorch's default on GPU): _foreach_sqrt allocates one temporary per
  // parameter during the step. fused: one kernel, no temporaries.
  bool fused = false;
};

class AdamW {
 public:
  AdamW(Backend& backend, std::vector<OptimizerParam*> params, AdamWOptions options);
  // One step over every parameter with a sharded gradient. States are created lazily on
  // the first step (zeros_like of the unpadded local shard), as torch.optim does.
  void step();
  // zero_grad(set_to_none=True): drops the sharded gradients.
  void zero_grad();
  int steps_taken() const { return step_; }
  // Checkpointing (runner/checkpoint.h): parameter i's states (empty tensors before the first
  // step), creating them as the first step would, and restoring the step count.
  const Tensor& exp_avg(size_t i) const { return exp_avg_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_.at(i); }
  bool has_state() const { return !exp_avg_.empty(); }
  void init_state();
  void set_steps_taken(int steps) { step_ = steps; }
  const std::vector<OptimizerParam*>& params() const { return params_; }

 private:
  Backend& b_;
  std::vector<OptimizerParam*> params_;
  AdamWOptions o_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  int step_ = 0;
  void ensure_state(size_t i);
};

// Clips the global L2 norm of all sharded gradients to max_norm. The local sum of squares
// is all-reduced over the shard group (gradients are replicated across HSDP's replicate dim
// after its all-reduce). With a tp dim, the squares of tp-sharded gradients sum over the
// shard and tp dims and those of tp-replicated ones over the shard dim only, so every element
// of the full gradient counts once (DTensor's norm of Shard / Replicate placements). Returns
// nothing: the norm stays on the device.
void clip_grad_norm(Backend& backend, const std::vector<OptimizerParam*>& params, double max_norm,
                    const MeshInfo& mesh);

}  // namespace fullshard
