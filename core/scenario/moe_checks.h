#pragma once
// What a scenario's model may use of the mixture-of-experts and Qwen3 fields today
// (core/model/moe_config.h; docs/moe.md says what is built).
#include "core/scenario/scenario.h"

namespace fullshard {

// Throws InputError naming the model field that is not built yet, or that does not compose
// with the rest of the scenario yet (NOTE [What MoE composes with] in moe_checks.cc).
// parse_scenario runs it.
void check_moe(const Scenario& s);

// model.moe {"capacity_factor": f >= 0, "drop_policy": "probs" | "position"}: token dropping
// (NOTE [Capacity factor] in core/model/moe_routing.h; 0 or absent: dropless). A dense model
// refuses it. "load_balance": "none" | "aux_loss" | "expert_bias" replaces the model's load
// balancing (check_moe refuses the two not built; "none" simulates a model that carries one).
void apply_moe_options(const nlohmann::json& v, ModelConfig& model);

// training.moe_routing: "balanced" (the default), "worst" or {"hot_expert_factor": k >= 1}, the
// hottest expert getting k times its share (NOTE [MoE routing assumption] in
// core/model/moe_routing.h; sets model.moe.hot_expert_factor), or {"recorded": M.jsonl}, a
// real run's --metrics file, relative to `base_dir` (NOTE [Recorded routing]; sets
// training.moe_routing_record). A dense model refuses it.
void apply_moe_routing(const nlohmann::json& v, ModelConfig& model, TrainingOptions& training,
                       const std::string& base_dir);

// training.moe_routing {"recorded": ...} against the rest of the scenario: one record per rank,
// and every recorded step holding the MoE layer calls a step of `s` makes on that rank (with a
// pp dim, its stages' MoE layers over the microbatches), for at
// least training.steps steps (InputError naming training.moe_routing.recorded). parse_scenario
// runs it.
void check_recorded_routing(const Scenario& s);

// NOTE [What expert parallelism needs] (scenario_ep.cc): throws InputError naming the field when
// s.expert_parallel.degree does not fit the model, the mesh or the other settings. The
// expert_parallel section's parser runs it; the planner runs it on its candidates.
void check_expert_parallel(const Scenario& s);

}  // namespace fullshard
