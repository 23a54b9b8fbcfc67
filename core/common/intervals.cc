#include "core/common/intervals.h"

#include <algorithm>

namespace fullshard {

std::vector<Interval> merged_intervals(std::vector<Interval> v) {
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

double covered_seconds(std::vector<Interval> v) {
  double t = 0;
  for (const auto& [start, end] : merged_intervals(std::move(v))) t += end - start;
  return t;
}

double uncovered_seconds(std::vector<Interval> busy, std::vector<Interval> covered) {
  const auto b = merged_intervals(std::move(busy));
  const auto c = merged_intervals(std::move(covered));
  double total = 0;
  size_t j = 0;
  for (const auto& [start, end] : b) {
    double cursor = start;
    while (j < c.size() && c[j].second <= cursor) ++j;
    for (size_t k = j; k < c.size() && c[k].first < end; ++k) {
      if (c[k].first > cursor) total += c[k].first - cursor;
      cursor = std::max(cursor, c[k].second);
      if (cursor >= end) break;
    }
    if (cursor < end) total += end - cursor;
  }
  return total;
}

}  // namespace fullshard
