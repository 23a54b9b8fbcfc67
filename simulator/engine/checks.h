#pragma once
// Structural protocol checks: they read the programs in host order and never look at time,
// so they hold for every timing the hardware could produce. See NOTE [Happens-before over
// streams] in stream_checks.cc and NOTE [Collective matching] in checks.cc.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "simulator/engine/diagnostics.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// When a device buffer freed while another stream may still use it is a problem
// (NOTE [Frees and the pool stream] in stream_checks.cc).
enum class FreeRule : uint8_t {
  // At the free: the pool stream (or the host) must already be ordered after every access
  // from other streams. Simple to follow; stricter than the hardware needs.
  kAtFree,
  // Only when memory of the pool is used again before that use is ordered after the old
  // accesses (FSDP2 defers the wait to the next use of the pool's stream).
  kAtReuse,
};

struct CheckOptions {
  // Programs may be a subset of the ranks (absent members are assumed identical).
  bool symmetric = false;
  bool collectives = true;  // mismatch and missing collectives across group members
  bool races = true;        // stream races (vector clocks)
  bool memory = true;       // use after free, free while in use, unordered first use
  FreeRule free_rule = FreeRule::kAtFree;
  // Cap on the problems kept: per rank for races and for memory problems; in all for the
  // collective checks (which report at most one per group). Further problems are dropped.
  size_t max_problems = 32;
};

// Compares the i-th collective each present member issues on each group (kind, coll_bytes,
// dtype, reduce op, name) and reports ranks that never issue one the others wait in.
// At most one problem per group: later ones usually follow from the first.
std::vector<Problem> check_collectives(const std::vector<Program>& programs,
                                       const std::vector<GroupInfo>& groups, bool symmetric,
                                       size_t max_problems = 32);

// Races and memory-safety problems of one rank's program (options.races / options.memory).
std::vector<Problem> check_streams(const Program& program, const CheckOptions& options = {});

// All of the above: collectives first, then each program's stream checks in program order.
std::vector<Problem> check_programs(const std::vector<Program>& programs,
                                    const std::vector<GroupInfo>& groups,
                                    const CheckOptions& options = {});

}  // namespace fullshard::sim
