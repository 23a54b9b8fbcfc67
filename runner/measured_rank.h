#pragma once
// What one rank measured over its whole run, and its JSON: the last record a worker sends the
// launcher (NOTE [Worker messages] in runner/worker.cc).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/checkpoint_saver.h"

namespace fullshard::runner {

struct MeasuredRank {
  int rank = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t init_peak_allocated_bytes = 0;  // before the first step (RankReport's)
  uint64_t init_peak_reserved_bytes = 0;
  CheckpointSaveStats checkpoint;                            // what its checkpoint saves cost
  std::vector<std::pair<std::string, int64_t>> path_counts;  // Backend::path_counts at its end
};

// {peak_allocated_bytes, peak_reserved_bytes, init_peak_*, checkpoint, path_counts: {path: calls}}
// (the rank travels beside it).
nlohmann::json measured_rank_json(const MeasuredRank& m);
// Its inverse for `rank`; a missing field keeps its default.
MeasuredRank measured_rank_from_json(const nlohmann::json& j, int rank);

}  // namespace fullshard::runner
