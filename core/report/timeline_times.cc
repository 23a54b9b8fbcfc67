#include "core/report/timeline_times.h"

#include <algorithm>

#include "core/common/error.h"

namespace fullshard {

std::vector<double> timeline_stream_times(const std::vector<uint64_t>& point_seqs,
                                          const std::vector<double>& host_times,
                                          std::vector<std::pair<uint64_t, double>> work_starts) {
  FULLSHARD_CHECK(point_seqs.size() == host_times.size(),
                  "timeline points and their host times disagree");
  std::sort(work_starts.begin(), work_starts.end());
  std::vector<double> out(point_seqs.size());
  double latest = 0;
  for (size_t i = 0; i < point_seqs.size(); ++i) {
    // The first work issued after the point (seqs are unique per call; > q, not >= q).
    auto it = std::upper_bound(work_starts.begin(), work_starts.end(),
                               std::make_pair(point_seqs[i], 1e300));
    double t = host_times[i];
    if (it != work_starts.end()) t = std::max(t, it->second);
    latest = i == 0 ? t : std::max(latest, t);
    out[i] = latest;
  }
  return out;
}

}  // namespace fullshard
