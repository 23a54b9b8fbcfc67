#pragma once
// Overlap accounting for real runs: the time each stream spent running work, as intervals,
// and the communication time no computation covered ("exposed"), as the simulator reports it.
#include <utility>
#include <vector>

namespace fullshard::cpu {

using Interval = std::pair<double, double>;  // [begin, end) in seconds

// Sorted, disjoint union of `v`.
std::vector<Interval> union_of(std::vector<Interval> v);
// Total length of the union of `v`.
double covered(const std::vector<Interval>& v);
// Length of union(comm) minus its intersection with union(compute).
double exposed(const std::vector<Interval>& comm, const std::vector<Interval>& compute);

}  // namespace fullshard::cpu
