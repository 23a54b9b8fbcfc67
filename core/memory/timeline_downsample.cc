#include "core/memory/timeline_downsample.h"

#include <algorithm>
#include <numeric>

namespace fullshard {

std::vector<size_t> downsample_indices(const std::vector<uint64_t>& allocated, size_t max_points) {
  std::vector<size_t> out;
  if (allocated.size() <= max_points || max_points < 4) {
    out.resize(allocated.size());
    std::iota(out.begin(), out.end(), size_t{0});
    return out;
  }
  const size_t buckets = max_points / 2;
  const size_t per = (allocated.size() + buckets - 1) / buckets;
  for (size_t b = 0; b < allocated.size(); b += per) {
    const size_t e = std::min(allocated.size(), b + per);
    size_t hi = b, lo = b;
    for (size_t i = b; i < e; ++i) {
      if (allocated[i] > allocated[hi]) hi = i;
      if (allocated[i] < allocated[lo]) lo = i;
    }
    out.push_back(std::min(lo, hi));
    if (lo != hi) out.push_back(std::max(lo, hi));
  }
  return out;
}

}  // namespace fullshard
