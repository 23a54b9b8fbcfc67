#pragma once
// Internal to the engine: which programs are present, which of them belong to each group,
// and each program's collectives per group in host order (the order NCCL matches them in).
#include <cstdint>
#include <vector>

#include "simulator/engine/program.h"

namespace fullshard::sim {

struct WorldIndex {
  std::vector<int> program_of_rank;            // global rank -> index into programs, or -1
  std::vector<std::vector<uint32_t>> present;  // per group: program indices in group order
  // [program][group]: instruction indices of that program's collectives on the group.
  std::vector<std::vector<std::vector<uint32_t>>> collectives;
  // [program]: per instruction, the collective's position on its group (collectives only).
  std::vector<std::vector<uint32_t>> collective_seq;
};

// Validates the world (FULLSHARD_CHECK: these are recorder bugs, not user input): distinct
// ranks, group indices in range, a collective's rank is a member of its group and, unless
// `symmetric`, every member of every group that is used has a program.
WorldIndex index_world(const std::vector<Program>& programs, const std::vector<GroupInfo>& groups,
                       bool symmetric);

}  // namespace fullshard::sim
