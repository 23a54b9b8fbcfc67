#pragma once
// Which modules of a decoder each pipeline stage holds, as torchtitan splits it by default
// (`_generate_llm_fqn_per_model_part` and `_get_pipeline_metadata` in
// torchtitan/distributed/pipeline_parallel.py; tests/data/oracle/pipeline_stage_split.json).
//
// NOTE [Stage split as torchtitan's]: the embeddings count as `input_weight` layers and the final
// norm + output projection as `output_weight` (torchtitan's
// `pipeline_parallel_{first,last}_stage_less_layers`, both 1 by default); the effective layers
// are dealt out evenly, the first `effective % stages` stages one more, and each stage takes
// its share of the transformer layers in order, the first and last stage their share less the
// weight. A stage can end up with no transformer layer (the last stage, when the layers run out
// first); torchtitan allows it and so does this. The number of stages is pp x the schedule's
// stages per rank (1, or 2 for multi-stage schedules), or ceil(effective / layers_per_stage).
#include <optional>
#include <string>
#include <vector>

#include "core/pipeline/pipeline_schedule.h"

namespace fullshard {

struct PipelineStageModules {
  bool embeddings = false;  // tok_embeddings (the first stage)
  int first_layer = 0;      // transformer layers [first_layer, first_layer + num_layers)
  int num_layers = 0;
  bool output = false;  // norm + output projection (the last stage)
  bool operator==(const PipelineStageModules&) const = default;
};

struct StageSplitFields {
  std::string stages = "pipeline.stages";
  std::string layers_per_stage = "pipeline.layers_per_stage";
  std::string input_weight = "pipeline.first_stage_less_layers";
  std::string output_weight = "pipeline.last_stage_less_layers";
};

// The modules of each of `num_stages` stages. InputError where torchtitan raises.
std::vector<PipelineStageModules> split_decoder_into_stages(int num_stages, int num_layers,
                                                            int input_weight, int output_weight,
                                                            const StageSplitFields& fields = {});

// How many stages torchtitan builds for `kind` over `pp` ranks: pp x (1 for GPipe / 1F1B,
// 2 otherwise), or ceil((layers + weights) / layers_per_stage) when that is given (then a
// multiple of pp, 1 per rank for single-stage schedules, at least 2 per rank for the others).
int pipeline_num_stages(PipelineScheduleKind kind, int pp, int num_layers,
                        std::optional<int> layers_per_stage, int input_weight, int output_weight,
                        const StageSplitFields& fields = {});

// "e0-4 4-8 8-12 12-16o": each stage's modules as tools/oracle/pipeline_stage_split.py writes them.
std::string format_stage_split(const std::vector<PipelineStageModules>& stages);

}  // namespace fullshard
