#include "core/data/window_order.h"

#include "core/common/error.h"
#include "core/common/splitmix.h"

namespace fullshard {

int64_t shuffled_window(uint64_t seed, int64_t epoch, int64_t index, int64_t windows) {
  FULLSHARD_CHECK(windows > 0 && index >= 0 && index < windows,
                  "shuffled_window: index out of the epoch");
  int half = 1;  // bits per Feistel half: the range 4^half >= windows
  while (half < 31 && (uint64_t{1} << (2 * half)) < static_cast<uint64_t>(windows)) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  const uint64_t key = splitmix64(splitmix64(seed ^ 0x5f0ff1edULL) ^ static_cast<uint64_t>(epoch));
  constexpr int kRounds = 6;
  auto permute = [&](uint64_t x) {
    uint64_t l = x >> half, r = x & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t f = splitmix64(key ^ (static_cast<uint64_t>(round) << 56) ^ r) & mask;
      const uint64_t next = l ^ f;
      l = r;
      r = next;
    }
    return (l << half) | r;
  };
  uint64_t y = permute(static_cast<uint64_t>(index));
  while (y >= static_cast<uint64_t>(windows)) y = permute(y);  // cycle walking
  return static_cast<int64_t>(y);
}

}  // namespace fullshard
