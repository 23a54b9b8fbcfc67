#include "backends/cpu/busy_intervals.h"

#include <algorithm>

namespace fullshard::cpu {

std::vector<Interval> union_of(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

double covered(const std::vector<Interval>& v) {
  double t = 0;
  for (const auto& iv : union_of(v)) t += iv.second - iv.first;
  return t;
}

double exposed(const std::vector<Interval>& comm, const std::vector<Interval>& compute) {
  const auto a = union_of(comm), b = union_of(compute);
  double overlap = 0;
  size_t j = 0;
  for (const auto& x : a) {
    while (j < b.size() && b[j].second <= x.first) ++j;
    for (size_t k = j; k < b.size() && b[k].first < x.second; ++k)
      overlap += std::min(x.second, b[k].second) - std::max(x.first, b[k].first);
  }
  return covered(a) - overlap;
}

}  // namespace fullshard::cpu
