#pragma once
// NOTE [Measured timeline times]: a measured memory timeline places each allocation or free
// where the simulator's does (docs/report-format.md): at the time the device starts the work the
// host issued right after it, not when the host made it (the host runs ahead of the streams, so
// host times would put a backward's allocations during the forward). A real backend reports,
// for every kernel and collective, the host_seq at which it was issued and when its stream
// started it (Backend::take_work_starts); a point made at host_seq q takes the start of the
// first work issued after q. A point with no work issued after it (the run's last frees) keeps
// its host time, a point is never placed before its host time, and the times are made
// non-decreasing (a running maximum), as the simulator's are.
#include <cstdint>
#include <utility>
#include <vector>

namespace fullshard {

// `point_seqs[i]` / `host_times[i]`: the host_seq and host clock of point i, in host order
// (non-decreasing seqs). `work_starts`: {issue host_seq, start time} in any order. Returns one
// time per point.
std::vector<double> timeline_stream_times(const std::vector<uint64_t>& point_seqs,
                                          const std::vector<double>& host_times,
                                          std::vector<std::pair<uint64_t, double>> work_starts);

}  // namespace fullshard
