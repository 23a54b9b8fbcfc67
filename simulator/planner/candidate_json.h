#pragma once
// A candidate written back as a scenario file (`fullshard plan --write-scenario`): the base
// scenario's JSON with the planner's settings put in, so that `fullshard simulate` and
// `fullshard train` run exactly what the planner evaluated (docs/planner.md).
#include <string>

#include <nlohmann/json.hpp>

#include "simulator/planner/search_space.h"

namespace fullshard::planner {

// `base` is a scenario JSON object (as written by the user or built from the plan flags) whose
// relative paths are already absolute (absolutize_paths). Returns it with name, description,
// training.{batch_per_rank, grad_accum_steps, activation_checkpointing},
// fsdp.{mesh, reshard_after_forward, mixed_precision.param_dtype / reduce_dtype, cpu_offload}
// and hardware.allocator.expandable_segments set from `c`; everything else is kept.
// parse_scenario of the result equals candidate_scenario(parse_scenario(base), c).
nlohmann::json candidate_scenario_json(const nlohmann::json& base, const Candidate& c,
                                       const std::string& name, const std::string& description);

// Rewrites the relative paths of a scenario JSON read from `base_dir` (model.hf_config, a
// hardware.profile ending in .json) as absolute ones, so the JSON can be written anywhere.
nlohmann::json absolutize_paths(nlohmann::json scenario, const std::string& base_dir);

}  // namespace fullshard::planner
