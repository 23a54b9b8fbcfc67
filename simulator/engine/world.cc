#include "simulator/engine/world.h"

#include <algorithm>
#include <string>

#include "core/common/error.h"

namespace fullshard::sim {

WorldIndex index_world(const std::vector<Program>& programs, const std::vector<GroupInfo>& groups,
                       bool symmetric) {
  WorldIndex w;
  int max_rank = -1;
  for (const Program& p : programs) {
    FULLSHARD_CHECK(p.rank >= 0, "negative rank " + std::to_string(p.rank));
    max_rank = std::max(max_rank, p.rank);
  }
  for (const GroupInfo& g : groups) {
    for (int r : g.ranks) {
      FULLSHARD_CHECK(r >= 0, "group " + g.name + " has a negative rank");
      max_rank = std::max(max_rank, r);
    }
  }
  w.program_of_rank.assign(static_cast<size_t>(max_rank + 1), -1);
  for (size_t i = 0; i < programs.size(); ++i) {
    int& slot = w.program_of_rank[static_cast<size_t>(programs[i].rank)];
    FULLSHARD_CHECK(slot < 0, "two programs for rank " + std::to_string(programs[i].rank));
    slot = static_cast<int>(i);
  }
  // NOTE [Linear membership]: which groups each program's rank belongs to, from one pass over
  // the groups' members; a search of the members per collective instruction made indexing
  // O(instructions x group size), quadratic in the world with every rank played.
  w.present.resize(groups.size());
  std::vector<std::vector<uint32_t>> member_of(programs.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int r : groups[g].ranks) {
      const int p = w.program_of_rank[static_cast<size_t>(r)];
      if (p < 0) continue;
      w.present[g].push_back(static_cast<uint32_t>(p));
      member_of[static_cast<size_t>(p)].push_back(static_cast<uint32_t>(g));
    }
  }
  std::vector<uint8_t> used(groups.size(), 0);
  w.collectives.resize(programs.size());
  w.collective_seq.resize(programs.size());
  for (size_t p = 0; p < programs.size(); ++p) {
    const Program& prog = programs[p];
    auto& per_group = w.collectives[p];
    per_group.resize(groups.size());
    auto& seq = w.collective_seq[p];
    seq.assign(prog.instrs.size(), 0);
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const Instr& in = prog.instrs[i];
      if (in.type != InstrType::kCollective) continue;
      FULLSHARD_CHECK(in.group < groups.size(), "rank " + std::to_string(prog.rank) +
                                                    " instruction " + std::to_string(i) +
                                                    " names group " + std::to_string(in.group) +
                                                    " of " + std::to_string(groups.size()));
      const auto& mine = member_of[p];  // ascending: groups were walked in order
      FULLSHARD_CHECK(std::binary_search(mine.begin(), mine.end(), in.group),
                      "rank " + std::to_string(prog.rank) + " issues a collective on group " +
                          groups[in.group].name + " it is not a member of");
      used[in.group] = 1;
      seq[i] = static_cast<uint32_t>(per_group[in.group].size());
      per_group[in.group].push_back(static_cast<uint32_t>(i));
    }
  }
  if (!symmetric) {
    for (size_t g = 0; g < groups.size(); ++g) {
      FULLSHARD_CHECK(!used[g] || w.present[g].size() == groups[g].ranks.size(),
                      "group " + groups[g].name +
                          " has members without a program (use symmetric mode for subsets)");
    }
  }
  return w;
}

}  // namespace fullshard::sim
