#include "simulator/engine/diagnostics.h"

#include <fmt/format.h>

namespace fullshard::sim {

std::string_view problem_kind_name(ProblemKind k) {
  switch (k) {
    case ProblemKind::kCollectiveMismatch: return "collective_mismatch";
    case ProblemKind::kCollectiveHang: return "collective_hang";
    case ProblemKind::kStreamRace: return "stream_race";
    case ProblemKind::kUseAfterFree: return "use_after_free";
    case ProblemKind::kFreeWhileInUse: return "free_while_in_use";
    case ProblemKind::kUnorderedFirstUse: return "unordered_first_use";
  }
  return "?";
}

std::string_view instr_name(const Program& program, const Instr& instr) {
  return instr.name < program.names.size() ? std::string_view(program.names[instr.name])
                                           : std::string_view();
}

std::string_view collective_kind_str(CollectiveKind k) { return collective_name(k); }

std::string_view reduce_op_str(ReduceOp op) { return reduce_op_name(op); }

std::string ranks_str(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out;
}

std::string group_str(const GroupInfo& group) {
  return fmt::format("{} [{}]", group.name, ranks_str(group.ranks));
}

std::string describe_collective(const Program& program, const Instr& instr) {
  const bool reduces =
      instr.coll == CollectiveKind::kReduceScatter || instr.coll == CollectiveKind::kAllReduce;
  return fmt::format("{} '{}' ({} B {}{}{})", collective_kind_str(instr.coll),
                     instr_name(program, instr), instr.coll_bytes, dtype_name(instr.dtype),
                     reduces ? " " : "", reduces ? reduce_op_str(instr.reduce) : "");
}

std::string describe_program_end(const Program& program) {
  for (size_t i = program.instrs.size(); i-- > 0;) {
    std::string_view name = instr_name(program, program.instrs[i]);
    if (!name.empty()) {
      return fmt::format("its program {} after '{}'", program.truncated ? "stopped early" : "ends",
                         name);
    }
  }
  return program.instrs.empty() ? "its program is empty"
                                : "its program ends before any named instruction";
}

Problem missing_collective_problem(const Program& waiter, const Instr& instr,
                                   const GroupInfo& group, size_t pos,
                                   const std::vector<int>& waiting,
                                   const std::vector<std::pair<int, std::string>>& absent) {
  Problem p;
  p.kind = ProblemKind::kCollectiveHang;
  p.step = instr.step;
  p.op = std::string(instr_name(waiter, instr));
  p.ranks = waiting;
  std::string why;
  for (size_t i = 0; i < absent.size(); ++i) {
    why += fmt::format("{}rank {} {}", i ? " and " : "", absent[i].first, absent[i].second);
    p.ranks.push_back(absent[i].first);
  }
  p.message = fmt::format("step {}: {} {} {} in {} #{} on group {} but {}", p.step,
                          waiting.size() > 1 ? "ranks" : "rank", ranks_str(waiting),
                          waiting.size() > 1 ? "wait" : "waits", describe_collective(waiter, instr),
                          pos, group_str(group), why);
  return p;
}

}  // namespace fullshard::sim
