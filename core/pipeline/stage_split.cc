#include "core/pipeline/stage_split.h"

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard {

std::vector<PipelineStageModules> split_decoder_into_stages(int num_stages, int num_layers,
                                                            int input_weight, int output_weight,
                                                            const StageSplitFields& fields) {
  if (num_stages < 1)
    throw InputError(fields.stages, fmt::format("{} stages", num_stages), "use 1 or more");
  if (num_layers < 0 || input_weight < 0 || output_weight < 0)
    throw InputError(num_layers < 0     ? fields.stages
                     : input_weight < 0 ? fields.input_weight
                                        : fields.output_weight,
                     "is negative", "use 0 or more");
  if (num_stages == 1) return {{true, 0, num_layers, true}};
  const int effective = num_layers + input_weight + output_weight;
  if (num_stages > effective)
    throw InputError(fields.stages,
                     fmt::format("{} stages for {} layers + {} + {} (embeddings, output)",
                                 num_stages, num_layers, input_weight, output_weight),
                     fmt::format("use at most {} stages", effective));
  const int per_stage = effective / num_stages, extra = effective % num_stages;
  if (input_weight > per_stage || output_weight > per_stage)
    throw InputError(input_weight > per_stage ? fields.input_weight : fields.output_weight,
                     fmt::format("{} is more than the {} layers per stage",
                                 std::max(input_weight, output_weight), per_stage),
                     fmt::format("use at most {}, or fewer stages", per_stage));
  std::vector<PipelineStageModules> out(num_stages);
  int next = 0;
  for (int s = 0; s < num_stages; ++s) {
    PipelineStageModules& m = out[s];
    int share = per_stage + (s < extra ? 1 : 0);
    if (s == 0) {
      m.embeddings = true;
      share -= input_weight;
    } else if (s == num_stages - 1) {
      m.output = true;
      share -= output_weight;
    }
    m.first_layer = next;
    m.num_layers = std::min(share, num_layers - next);
    next += m.num_layers;
  }
  return out;
}

int pipeline_num_stages(PipelineScheduleKind kind, int pp, int num_layers,
                        std::optional<int> layers_per_stage, int input_weight, int output_weight,
                        const StageSplitFields& fields) {
  const bool single = is_single_stage_schedule(kind);
  if (!layers_per_stage) return pp * (single ? 1 : 2);
  if (*layers_per_stage < 1)
    throw InputError(fields.layers_per_stage, fmt::format("is {}", *layers_per_stage),
                     "use 1 or more, or leave it out");
  const int effective = num_layers + input_weight + output_weight;
  const int stages = (effective + *layers_per_stage - 1) / *layers_per_stage;
  const std::string made =
      fmt::format("{} layers + {} + {} at {} per stage make {} stages", num_layers, input_weight,
                  output_weight, *layers_per_stage, stages);
  if (stages % pp != 0)
    throw InputError(fields.layers_per_stage, made + fmt::format(", not a multiple of pp {}", pp),
                     "choose layers_per_stage so that the stages divide over the pp ranks");
  if (single && stages != pp)
    throw InputError(
        fields.layers_per_stage,
        made + fmt::format(" for {}, which runs one per rank", pipeline_schedule_name(kind)),
        fmt::format("use {} or more", num_layers / pp));
  if (!single && stages < 2 * pp)
    throw InputError(
        fields.layers_per_stage,
        made + fmt::format(" for {}, which needs 2 or more per rank", pipeline_schedule_name(kind)),
        "use fewer layers per stage");
  return stages;
}

std::string format_stage_split(const std::vector<PipelineStageModules>& stages) {
  std::string out;
  for (const PipelineStageModules& s : stages) {
    if (!out.empty()) out += ' ';
    if (s.embeddings) out += 'e';
    out += s.num_layers > 0 ? fmt::format("{}-{}", s.first_layer, s.first_layer + s.num_layers)
                            : "0-0";
    if (s.output) out += 'o';
  }
  return out;
}

}  // namespace fullshard
