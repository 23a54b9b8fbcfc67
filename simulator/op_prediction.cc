#include "simulator/op_prediction.h"

#include <algorithm>

namespace fullshard::sim {

std::vector<PredictedKeyTimes> predicted_key_times(const PlayedRun& run, int rank) {
  std::vector<PredictedKeyTimes> out;
  size_t p = run.programs.size();
  for (size_t i = 0; i < run.report.classes.size() && i < run.programs.size(); ++i) {
    const auto& rs = run.report.classes[i].ranks;
    if (std::find(rs.begin(), rs.end(), rank) != rs.end()) p = i;
  }
  if (p == run.programs.size() || p >= run.result.ranks.size()) return out;
  const Program& prog = run.programs[p];
  const auto& times = run.result.ranks[p].times;
  bool active = false;
  for (size_t i = 0; i < prog.instrs.size() && i < times.size(); ++i) {
    const Instr& in = prog.instrs[i];
    if (in.type == InstrType::kMarker && prog.names[in.name] == "step end") active = false;
    if (in.type != InstrType::kKernel) continue;
    if (in.op == OpKind::kLoadBatch) active = true;
    if (!active || in.step < 0 || times[i].start < 0) continue;
    if (out.size() <= static_cast<size_t>(in.step)) out.resize(static_cast<size_t>(in.step) + 1);
    out[static_cast<size_t>(in.step)][key_id(op_key(prog.names[in.name]), op_kind_name(in.op))] +=
        std::max(0.0, times[i].end - times[i].start);
  }
  return out;
}

const PredictedKeyTimes* predicted_for_step(const std::vector<PredictedKeyTimes>& steps, int step) {
  if (steps.empty() || step < 0) return nullptr;
  return &steps[std::min(static_cast<size_t>(step), steps.size() - 1)];
}

}  // namespace fullshard::sim
