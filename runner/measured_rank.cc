#include "runner/measured_rank.h"

namespace fullshard::runner {

nlohmann::json measured_rank_json(const MeasuredRank& m) {
  nlohmann::json paths = nlohmann::json::object();  // NOTE [Attention path counter]
  for (const auto& [path, calls] : m.path_counts) paths[path] = calls;
  return {{"peak_allocated_bytes", m.peak_allocated_bytes},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"init_peak_allocated_bytes", m.init_peak_allocated_bytes},
          {"init_peak_reserved_bytes", m.init_peak_reserved_bytes},
          {"checkpoint", checkpoint_stats_json(m.checkpoint)},
          {"path_counts", paths}};
}

MeasuredRank measured_rank_from_json(const nlohmann::json& j, int rank) {
  MeasuredRank m;
  m.rank = rank;
  m.peak_allocated_bytes = j.value("peak_allocated_bytes", uint64_t{0});
  m.peak_reserved_bytes = j.value("peak_reserved_bytes", uint64_t{0});
  m.init_peak_allocated_bytes = j.value("init_peak_allocated_bytes", uint64_t{0});
  m.init_peak_reserved_bytes = j.value("init_peak_reserved_bytes", uint64_t{0});
  if (j.contains("checkpoint")) m.checkpoint = checkpoint_stats_from_json(j["checkpoint"]);
  if (j.contains("path_counts") && j["path_counts"].is_object())
    for (const auto& [path, calls] : j["path_counts"].items())
      m.path_counts.emplace_back(path, calls.get<int64_t>());
  return m;
}

}  // namespace fullshard::runner
