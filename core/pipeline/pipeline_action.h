#pragma once
// One compute action of a pipeline schedule, as torch.distributed.pipelining names them
// (schedules.py, `_Action`): stage `stage` runs `op` on microbatch `microbatch`. A rank's
// schedule is the ordered list of its actions; PyTorch's runtime executes that list in order,
// adding only communication (send/recv), unshard/reshard and reduce-grad actions around it.
#include <string>
#include <vector>

namespace fullshard {

enum class PipelineOp {
  kForward,         // "F"
  kFullBackward,    // "B": input and weight gradients together
  kBackwardInput,   // "I": the input gradient only (zero-bubble schedules)
  kBackwardWeight,  // "W": the weight gradient, deferred from its "I"
};

struct PipelineAction {
  int stage = 0;
  PipelineOp op = PipelineOp::kForward;
  int microbatch = 0;
  // DualPipeV's OVERLAP_F_B: this action and the next form one overlapped forward + backward
  // pair (PyTorch runs the pair one after the other unless a custom overlap function is set).
  bool overlaps_next = false;

  bool operator==(const PipelineAction&) const = default;
};

// A schedule: per pp rank, the actions that rank runs, in order.
using PipelineOrder = std::vector<std::vector<PipelineAction>>;

// "F", "B", "I", "W".
const char* pipeline_op_letter(PipelineOp op);
// One rank's actions as PyTorch prints them, space-separated: "0F0 2F0 2I0 2W0 ..." and
// "(0F3;3B1)OVERLAP_F_B" for an overlapped pair.
std::string format_pipeline_actions(const std::vector<PipelineAction>& actions);

}  // namespace fullshard
