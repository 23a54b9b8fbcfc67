#pragma once
// Why the planner did not pick each alternative: one line per rejected family of candidates
// (every value of each setting the recommendation does not use, e.g. "precision fp32",
// "sharding HSDP 4x64", "cpu_offload on"), from the best candidate of that family.
#include <string>
#include <vector>

#include "simulator/planner/planner.h"

namespace fullshard::planner {

struct FamilyReason {
  std::string setting;    // "sharding", "reshard_after_forward", "precision", "cpu_offload",
                          // "activation_checkpointing", "batch", "expandable_segments"
  std::string value;      // e.g. "HSDP 4x64", "fp32", "on", "mb 2 x ga 1"
  std::string reason;     // "out of memory by 12.3 GiB ...", "14% slower than the best because ..."
  size_t best_index = 0;  // the family's best candidate: index into PlanResult::configs
};

// `r.configs` in rank order. Empty when there are no configurations.
std::vector<FamilyReason> family_reasons(const PlanResult& r);

// Sizes and durations for messages: "12.34 GiB", "6.0 MiB", "473.0 KiB"; "13.144 s", "1.2 ms".
std::string bytes_text(uint64_t bytes);
std::string seconds_text(double s);

}  // namespace fullshard::planner
