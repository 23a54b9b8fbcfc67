#pragma once
// The planner's output: the ranked table and family reasons as text, and OUT.json
// (docs/planner.md, "Output").
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "simulator/planner/planner.h"

namespace fullshard::planner {

// The ranked table (the first `top` rows, the recommendation first), the reason each rejected
// family lost, and what the search did.
std::string plan_text(const PlanOptions& o, const PlanResult& r, size_t top, double wall_s);

// OUT.json: the request, counts (`evaluated`, ...), `recommended`, `families[]` and
// `configs[]` in rank order, each with `rank`, `fits` (null when ruled out by its time bound,
// unsimulated), `verdict`, `peak_reserved_bytes`,
// `headroom_bytes`, `step_time_s`, `tokens_per_s_per_gpu`, `mfu` and the settings.
nlohmann::json plan_json(const PlanOptions& o, const PlanResult& r, double wall_s);

}  // namespace fullshard::planner
