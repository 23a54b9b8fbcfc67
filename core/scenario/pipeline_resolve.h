#pragma once
// The pipeline_parallel section resolved for a scenario built in code (the planner's pp
// candidates): the same checks and stage split as a scenario file's section.
#include <cstdint>

#include "core/scenario/scenario.h"

namespace fullshard {

// `s` has its pp mesh dim (fsdp.mesh "pp"), model, training and hardware set; returns what
// parse_scenario resolves from {"schedule": schedule, "microbatch_size": microbatch_size}
// (torchtitan's default stage split). Throws InputError naming the field as a file's would.
PipelineParallelOptions resolve_pipeline_parallel(const Scenario& s, PipelineScheduleKind schedule,
                                                  int64_t microbatch_size);

}  // namespace fullshard
