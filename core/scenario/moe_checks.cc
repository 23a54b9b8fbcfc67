#include "core/scenario/moe_checks.h"

#include <string>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario_sections.h"

namespace fullshard {

void check_moe(const Scenario& s) {
  const ModelConfig& m = s.model;
  if ((m.explicit_head_dim > 0 || m.qk_norm) && m.implementation.compile)
    throw InputError("model.implementation.compile",
                     "is true with Qwen3's decoupled head_dim / q-k norms, which the compiled "
                     "block does not fuse yet",
                     "use the eager block (compile false)");
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

void apply_moe_routing(const nlohmann::json& v, ModelConfig& model) {
  namespace jr = json_reader;
  const std::string P = "training.moe_routing";
  if (!model.moe.enabled())
    throw InputError(P, "is set, but the model has no experts",
                     "remove it, or name a mixture-of-experts model (docs/moe.md)");
  if (v.is_string()) {  // "worst": NOTE [Worst-case routing] in simulator/worst_routing.h
    const std::string c = jr::get_choice(v, P, {"balanced", "worst"});
    model.moe.hot_expert_factor = c == "worst" ? static_cast<double>(model.moe.num_experts) : 1.0;
    return;
  }
  if (!v.is_object())
    throw InputError(P, "is " + jr::describe(v),
                     "write \"balanced\", \"worst\" or {\"hot_expert_factor\": 2}");
  scenario_detail::check_fields(v, P);
  jr::require_field(v, P, "hot_expert_factor",
                    "give the hottest expert's share over a balanced one, e.g. 2");
  model.moe.hot_expert_factor =
      jr::get_number(v.at("hot_expert_factor"), P + ".hot_expert_factor", 1, true,
                     static_cast<double>(model.moe.num_experts), true, "2");
}

}  // namespace fullshard
