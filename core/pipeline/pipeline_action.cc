#include "core/pipeline/pipeline_action.h"

#include <fmt/format.h>

namespace fullshard {

const char* pipeline_op_letter(PipelineOp op) {
  switch (op) {
    case PipelineOp::kForward: return "F";
    case PipelineOp::kFullBackward: return "B";
    case PipelineOp::kBackwardInput: return "I";
    case PipelineOp::kBackwardWeight: return "W";
  }
  return "?";
}

std::string format_pipeline_actions(const std::vector<PipelineAction>& actions) {
  std::string out;
  auto one = [](const PipelineAction& a) {
    return fmt::format("{}{}{}", a.stage, pipeline_op_letter(a.op), a.microbatch);
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!out.empty()) out += ' ';
    if (actions[i].overlaps_next && i + 1 < actions.size()) {
      out += fmt::format("({};{})OVERLAP_F_B", one(actions[i]), one(actions[i + 1]));
      ++i;
    } else {
      out += one(actions[i]);
    }
  }
  return out;
}

}  // namespace fullshard
