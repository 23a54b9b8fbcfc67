#pragma once
// Busy-time arithmetic over [start, end) intervals in seconds: how much communication no
// computation covered ("exposed"). Used by the simulator's engine and by the real backends'
// step accounting, so both report exposed communication the same way.
#include <utility>
#include <vector>

namespace fullshard {

using Interval = std::pair<double, double>;

// Sorted, disjoint union of `v` (empty intervals dropped).
std::vector<Interval> merged_intervals(std::vector<Interval> v);
// Total length of the union of `v`.
double covered_seconds(std::vector<Interval> v);
// Length of the union of `busy` minus the union of `covered`.
double uncovered_seconds(std::vector<Interval> busy, std::vector<Interval> covered);

}  // namespace fullshard
