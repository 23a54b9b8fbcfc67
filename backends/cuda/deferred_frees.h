#pragma once
// The pure part of deferred frees (NOTE [Pinned host frees]): split a list of pending frees into
// the finished ones, handed on in order, and the rest, kept in order.
//
// NOTE [No self-move]: the loop compacts the kept entries towards the front. An entry that is
// already in its place must not be move-assigned onto itself: libstdc++'s vector move assignment
// empties a vector assigned to itself, which emptied a pending free's fence list, so the next
// pass took it for finished and freed memory a stream was still copying into.
#include <cstddef>
#include <utility>
#include <vector>

namespace fullshard::cuda {

template <class T, class Done, class Take>
void take_finished(std::vector<T>& pending, Done done, Take take) {
  size_t keep = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (done(pending[i])) {
      take(std::move(pending[i]));
      continue;
    }
    if (keep != i) pending[keep] = std::move(pending[i]);
    ++keep;
  }
  pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(keep), pending.end());
}

}  // namespace fullshard::cuda
