#pragma once
// training.float8 (docs/float8.md, docs/scenario-format.md): parsing and what it composes with.
#include <nlohmann/json_fwd.hpp>

#include "core/model/float8_config.h"

namespace fullshard {

struct Scenario;

// {"recipe": "tensorwise", "enable_fsdp_float8_all_gather": true,
//  "precompute_float8_dynamic_scale_for_fsdp": true, "filter_fqns": ["output"]}
Float8Training parse_float8(const nlohmann::json& v);

// NOTE [What float8 composes with] in float8_checks.cc: throws InputError naming the field.
void check_float8(const Scenario& s);

}  // namespace fullshard
