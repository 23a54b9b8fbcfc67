#pragma once
// What a scenario's model may use of the mixture-of-experts and Qwen3 fields today
// (core/model/moe_config.h; docs/moe.md says what is built).
#include "core/scenario/scenario.h"

namespace fullshard {

// Throws InputError naming the model field the transformer does not build yet (decoupled
// head_dim, q/k norms) or that MoE does not compose with yet. parse_scenario runs it.
void check_moe(const Scenario& s);

}  // namespace fullshard
