#pragma once
// What training.frozen and model.lora run with (NOTE [What frozen parameters compose with] in
// scenario_lora.cc): throws InputError naming the field. parse_scenario runs it; the planner
// runs it on its candidates, whose meshes and precision replace the scenario's.
#include "core/scenario/scenario.h"

namespace fullshard {

void check_frozen(const Scenario& s);
// The dtype frozen parameters are kept in: training.frozen_dtype, else bf16 under model.lora
// (fine-tuning recipes keep the base in bf16), else the original dtype (training.orig_dtype).
DType frozen_dtype(const Scenario& s);
// fsdp.ignored_params (NOTE [What ignored parameters compose with] in scenario_ignored.cc);
// check_frozen runs it first.
void check_ignored_params(const Scenario& s);
// training.frozen_dtype "nf4" (NOTE [What NF4 composes with] in scenario_nf4.cc); check_frozen
// runs it.
void check_nf4(const Scenario& s);

}  // namespace fullshard
