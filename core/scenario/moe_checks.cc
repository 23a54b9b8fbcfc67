#include "core/scenario/moe_checks.h"

#include <string>

#include "core/common/error.h"

namespace fullshard {

void check_moe(const Scenario& s) {
  const ModelConfig& m = s.model;
  if (m.explicit_head_dim > 0)
    throw InputError("model.head_dim",
                     "is " + std::to_string(m.explicit_head_dim) + ", not dim / n_heads (" +
                         std::to_string(m.dim / m.n_heads) +
                         "), which the transformer does not build yet",
                     "parameter counts are exact (docs/models.md); to simulate, use a model whose "
                     "head_dim is dim / n_heads");
  if (m.qk_norm)
    throw InputError("model.qk_norm", "is true, which the transformer does not build yet",
                     "parameter counts are exact (docs/models.md); to simulate, use a model "
                     "without q/k norms");
  if (!m.moe.enabled()) return;
  // NOTE [What MoE composes with]: the MoE layer is built as torchtitan runs it with ep = 1
  // (core/model/moe_layer.cc); these variants and compositions are not built yet and are
  // refused naming the field rather than simulated as something else (tp > 1: in
  // check_tensor_parallel, which the planner's candidates go through too).
  const MoeConfig& e = m.moe;
  const std::string fix = "docs/moe.md lists what the MoE layer builds so far";
  if (e.score_before_experts)
    throw InputError("model.moe.score_before_experts", "is true, which is not built yet",
                     "use false (torchtitan's qwen3 and deepseek_v3 models); " + fix);
  if (e.shared_expert_gate)
    throw InputError("model.moe.shared_expert_gate", "is true (qwen2_moe), which is not built yet",
                     fix);
  if (e.load_balance != MoeLoadBalance::kNone)
    throw InputError("model.moe.load_balance",
                     e.load_balance == MoeLoadBalance::kAuxLoss
                         ? "is an auxiliary loss (output_router_logits), which is not built yet"
                         : "is the expert bias, which is not built yet",
                     "leave load balancing off to simulate; " + fix);
  if (m.implementation.compile)
    throw InputError("model.implementation.compile", "is true with a mixture-of-experts model",
                     "use the eager block; " + fix);
}

}  // namespace fullshard
