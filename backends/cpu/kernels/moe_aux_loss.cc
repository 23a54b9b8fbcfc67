// The auxiliary load-balancing loss on the CPU (NOTE [Auxiliary load-balancing loss] in
// core/model/moe_aux_loss.h; contracts in docs/kernels.md): the scores' column sums, the loss
// term, and its constant gradient per expert. fp32 values, sums in double rounded once.
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/moe_args.h"

namespace fullshard::cpu::detail {

// acc[e] += sum_n x[n, e] (in place).
void moe_add_sum_rows(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const AuxLossArgs a = AuxLossArgs::decode(op);  // core/runtime/moe_args.h
  const float* x = static_cast<const float*>(in[0]);
  float* acc = static_cast<float*>(out[0]);
  for (int64_t e = 0; e < a.experts; ++e) {
    double s = 0;
    for (int64_t n = 0; n < a.tokens; ++n) s += x[n * a.experts + e];
    acc[e] = static_cast<float>(static_cast<double>(acc[e]) + s);
  }
}

// loss += value * sum_e counts[e] probs[e] (in place).
void moe_aux_loss(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const AuxLossArgs a = AuxLossArgs::decode(op);
  const float* counts = static_cast<const float*>(in[0]);
  const float* probs = static_cast<const float*>(in[1]);
  float* loss = static_cast<float*>(out[0]);
  double dot = 0;
  for (int64_t e = 0; e < a.experts; ++e)
    dot += static_cast<double>(counts[e]) * static_cast<double>(probs[e]);
  loss[0] = static_cast<float>(static_cast<double>(loss[0]) + a.value * dot);
}

// out[n, e] = g[n, e] + value * counts[e].
void moe_aux_loss_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const AuxLossArgs a = AuxLossArgs::decode(op);
  const float* g = static_cast<const float*>(in[0]);
  const float* counts = static_cast<const float*>(in[1]);
  float* y = static_cast<float*>(out[0]);
  for (int64_t e = 0; e < a.experts; ++e) {
    const float add = static_cast<float>(a.value * static_cast<double>(counts[e]));
    for (int64_t n = 0; n < a.tokens; ++n) y[n * a.experts + e] = g[n * a.experts + e] + add;
  }
}

}  // namespace fullshard::cpu::detail
