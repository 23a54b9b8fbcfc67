#pragma once
// What the simulator finds wrong with the programs it plays: protocol errors that hang or
// corrupt data on real hardware. Every message is one line that names the step, the ranks,
// the op and (for collectives) the group with its ranks, so it can be acted on without a trace.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "simulator/engine/program.h"

namespace fullshard::sim {

enum class ProblemKind : uint8_t {
  kCollectiveMismatch,  // members of a group issue different i-th collectives
                        // (kind/size/dtype/op/name)
  kCollectiveHang,      // some members wait in a collective another member never reaches
  kStreamRace,          // unordered conflicting accesses to a buffer from two streams
  kUseAfterFree,        // an access after the host freed the buffer (or a double free)
  kFreeWhileInUse,      // freed (FreeRule::kAtFree) or its memory reused (kAtReuse) while another
                        // stream may still use it
  kUnorderedFirstUse,   // first use on a non-pool stream not ordered after the pool's earlier work
};
std::string_view problem_kind_name(ProblemKind k);  // "collective_mismatch", ...

struct Problem {
  ProblemKind kind = ProblemKind::kCollectiveMismatch;
  std::string message;     // "step 1: ...", one line
  std::vector<int> ranks;  // global ranks involved
  int step = 0;
  std::string op;  // the op or collective at fault
};

// ---- message helpers shared by the checks and the timing engine ----

// names[instr.name], or "" when the program has no such name.
std::string_view instr_name(const Program& program, const Instr& instr);
std::string_view collective_kind_str(CollectiveKind k);  // "all_gather", "reduce_scatter", ...
std::string_view reduce_op_str(ReduceOp op);             // "sum", "avg", "premul_sum", "max"
// "0,1,3"
std::string ranks_str(const std::vector<int>& ranks);
// "shard [0,1,2,3]"
std::string group_str(const GroupInfo& group);
// "all_gather 'layers.2 all_gather' (4194304 B bf16)"; reductions add their op: "(... bf16 sum)".
std::string describe_collective(const Program& program, const Instr& instr);
// "its program ends after 'layers.3 reduce_scatter'" (or "stopped early after" when truncated).
std::string describe_program_end(const Program& program);

// A collective hang: `waiting` ranks issued collective #pos on `group` (`instr` of `waiter` is
// one of them); `absent` lists each member that does not reach it, with the reason
// ("never issues it (its program ends after 'x')", "is blocked: ...").
Problem missing_collective_problem(const Program& waiter, const Instr& instr,
                                   const GroupInfo& group, size_t pos,
                                   const std::vector<int>& waiting,
                                   const std::vector<std::pair<int, std::string>>& absent);

}  // namespace fullshard::sim
