#pragma once
// Downsampling of memory timelines for reports and plots: keeps at most `max_points` of the
// points, always each bucket's highest and lowest allocated point (in time order), so the peak
// is never lost. Shared by the simulator's report and the real backends' measured report.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fullshard {

// Indices (increasing) of the points to keep, given each point's allocated bytes.
std::vector<size_t> downsample_indices(const std::vector<uint64_t>& allocated, size_t max_points);

}  // namespace fullshard
