#include "simulator/engine/checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "simulator/engine/world.h"

namespace fullshard::sim {

// NOTE [Collective matching]: NCCL matches the collectives of a communicator by the order in
// which each rank enqueues them (host order), whatever stream they run on. So the i-th
// collective a rank issues on a group meets the i-th of every other member. If they differ in
// kind, size, dtype or reduce op, the hardware hangs or corrupts data; if their names differ
// the ranks' programs diverged (e.g. two same-sized all-gathers swapped), which silently
// exchanges the wrong parameters. If a member issues fewer, the others wait forever.

namespace {

bool same_collective(const Program& pa, const Instr& a, const Program& pb, const Instr& b) {
  // An all-to-all's sizes differ per member by design (each sends what it routed): it matches
  // on kind, dtype and name.
  const bool sized = a.coll != CollectiveKind::kAllToAll;
  if (a.coll != b.coll || (sized && a.coll_bytes != b.coll_bytes) || a.dtype != b.dtype)
    return false;
  const bool reduces =
      a.coll == CollectiveKind::kReduceScatter || a.coll == CollectiveKind::kAllReduce;
  if (reduces && a.reduce != b.reduce) return false;
  return instr_name(pa, a) == instr_name(pb, b);
}

Problem mismatch_problem(const std::vector<Program>& programs, const GroupInfo& group,
                         const std::vector<uint32_t>& members, const WorldIndex& w, uint32_t g,
                         size_t pos) {
  // Cluster the members by what they issued, in group order.
  struct Cluster {
    uint32_t program;
    const Instr* instr;
    std::vector<int> ranks;
  };
  std::vector<Cluster> clusters;
  Problem p;
  p.kind = ProblemKind::kCollectiveMismatch;
  for (uint32_t m : members) {
    const Instr& in = programs[m].instrs[w.collectives[m][g][pos]];
    bool placed = false;
    for (Cluster& c : clusters) {
      if (same_collective(programs[c.program], *c.instr, programs[m], in)) {
        c.ranks.push_back(programs[m].rank);
        placed = true;
        break;
      }
    }
    if (!placed) clusters.push_back({m, &in, {programs[m].rank}});
    p.ranks.push_back(programs[m].rank);
  }
  const Cluster& first = clusters.front();
  p.step = first.instr->step;
  p.op = std::string(instr_name(programs[first.program], *first.instr));
  std::string who;
  for (size_t i = 0; i < clusters.size(); ++i) {
    const Cluster& c = clusters[i];
    who += fmt::format("{}{} {} issued {}", i ? ", " : "", c.ranks.size() > 1 ? "ranks" : "rank",
                       ranks_str(c.ranks), describe_collective(programs[c.program], *c.instr));
  }
  p.message = fmt::format("step {}: collective mismatch on group {}, collective #{}: {}", p.step,
                          group_str(group), pos, who);
  return p;
}

}  // namespace

std::vector<Problem> check_collectives(const std::vector<Program>& programs,
                                       const std::vector<GroupInfo>& groups, bool symmetric,
                                       size_t max_problems) {
  std::vector<Problem> problems;
  const WorldIndex w = index_world(programs, groups, symmetric);
  for (uint32_t g = 0; g < groups.size() && problems.size() < max_problems; ++g) {
    const std::vector<uint32_t>& members = w.present[g];
    if (members.empty()) continue;
    size_t min_count = SIZE_MAX, max_count = 0;
    for (uint32_t m : members) {
      min_count = std::min(min_count, w.collectives[m][g].size());
      max_count = std::max(max_count, w.collectives[m][g].size());
    }
    bool mismatch = false;
    const uint32_t ref = members.front();
    for (size_t pos = 0; pos < min_count && !mismatch; ++pos) {
      const Instr& a = programs[ref].instrs[w.collectives[ref][g][pos]];
      for (size_t k = 1; k < members.size(); ++k) {
        const uint32_t m = members[k];
        const Instr& b = programs[m].instrs[w.collectives[m][g][pos]];
        if (!same_collective(programs[ref], a, programs[m], b)) {
          problems.push_back(mismatch_problem(programs, groups[g], members, w, g, pos));
          mismatch = true;
          break;
        }
      }
    }
    if (mismatch || min_count == max_count) continue;
    std::vector<int> waiting;
    std::vector<std::pair<int, std::string>> absent;
    uint32_t example = 0;
    for (uint32_t m : members) {
      if (w.collectives[m][g].size() > min_count) {
        if (waiting.empty()) example = m;
        waiting.push_back(programs[m].rank);
      } else {
        absent.emplace_back(programs[m].rank,
                            "never issues it (" + describe_program_end(programs[m]) + ")");
      }
    }
    const Instr& in = programs[example].instrs[w.collectives[example][g][min_count]];
    problems.push_back(
        missing_collective_problem(programs[example], in, groups[g], min_count, waiting, absent));
  }
  return problems;
}

std::vector<Problem> check_programs(const std::vector<Program>& programs,
                                    const std::vector<GroupInfo>& groups,
                                    const CheckOptions& options) {
  std::vector<Problem> problems;
  if (options.collectives) {
    problems = check_collectives(programs, groups, options.symmetric, options.max_problems);
  }
  if (options.races || options.memory) {
    for (const Program& p : programs) {
      std::vector<Problem> more = check_streams(p, options);
      for (Problem& pr : more) problems.push_back(std::move(pr));
    }
  }
  return problems;
}

}  // namespace fullshard::sim
