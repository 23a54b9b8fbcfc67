#pragma once
// The kAdamW op's argument layout, in one place: core/optim/adamw.cc encodes it, and every
// backend's kernel decodes it here (so the CPU reference and the CUDA kernel cannot drift).
//   inputs:  (param, grad, exp_avg, exp_avg_sq) per parameter
//   outputs: (param, exp_avg, exp_avg_sq[, denom]) per parameter; the denominator
//            (torch's exp_avg_sq_sqrt temporary) only for foreach, iargs[0] == 0
//   fargs:   lr, beta1, beta2, eps, weight_decay, step
#include <cstddef>

#include "core/runtime/op.h"

namespace fullshard {

struct AdamWArgs {
  bool fused = false;
  size_t params = 0;             // parameters updated by the op
  size_t outputs_per_param = 0;  // 3 fused, 4 foreach
  // NOTE [AdamW scalars]: torch computes the step's scalars on the host as Python floats
  // (double), then the per-element math runs in fp32; these are those scalars, rounded once.
  float decay = 1;            // 1 - lr * weight_decay (decoupled weight decay)
  float one_minus_beta1 = 0;  // exp_avg.lerp_(grad, 1 - beta1)
  float beta2 = 0;
  float one_minus_beta2 = 0;
  float neg_step_size = 0;          // -lr / (1 - beta1^step)
  float bias_correction2_sqrt = 1;  // sqrt(1 - beta2^step)
  float eps = 0;

  // Decodes and checks `op` (FULLSHARD_CHECK: the counts, step >= 1, every operand of a
  // parameter the same numel). A failure names the op. (AdamWHyperparams encodes.)
  static AdamWArgs decode(const OpCall& op);
};

// The encoding side of kAdamW: torch.optim.AdamW's hyperparameters and the step, as the host
// holds them (AdamWArgs::decode derives the fp32 scalars).  fargs {lr, beta1, beta2, eps,
// weight_decay, step}; iargs {fused}
struct AdamWHyperparams {
  bool fused = false;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 0;

  void encode(OpCall& op) const {
    op.fargs = {lr, beta1, beta2, eps, weight_decay, static_cast<double>(step)};
    op.iargs = {fused ? 1 : 0};
  }
};

inline AdamWArgs decode_adamw(const OpCall& op) { return AdamWArgs::decode(op); }

}  // namespace fullshard
