#pragma once
// The "pipeline_parallel" section of a scenario (torchtitan's parallelism.pipeline_parallel_*
// fields), and what parse_scenario resolves from it: the stages each pp rank builds and the
// number of microbatches. The pp degree is the size of fsdp.mesh's "pp" dim (outermost, as
// torchtitan's ["pp", "dp_replicate", "dp_shard", "tp"]). Parsed in scenario_pipeline.cc.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/pipeline/pipeline_schedule.h"
#include "core/pipeline/stage_split.h"

namespace fullshard {

struct PipelineParallelOptions {
  // As written (defaults: torchtitan's).
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;  // pipeline_parallel_schedule
  int64_t microbatch_size = 1;          // pipeline_parallel_microbatch_size (sequences)
  std::optional<int> layers_per_stage;  // pipeline_parallel_layers_per_stage
  int first_stage_less_layers = 1;      // pipeline_parallel_first_stage_less_layers
  int last_stage_less_layers = 1;       // pipeline_parallel_last_stage_less_layers
  // module_fqns_per_model_part: an explicit split (empty: torchtitan's default split).
  std::vector<std::vector<std::string>> module_fqns_per_model_part;

  // Resolved by parse_scenario.
  int degree = 1;                            // the pp dim's size (1: no pipeline parallelism)
  int stages_per_rank = 1;                   // virtual stages per rank
  int microbatches = 1;                      // training.batch_per_rank / microbatch_size
  std::vector<PipelineStageModules> stages;  // every stage's modules, by stage index

  bool enabled() const { return degree > 1; }
  PipelineScheduleOptions schedule_options() const {
    return {schedule, degree, stages_per_rank, microbatches};
  }
};

}  // namespace fullshard
