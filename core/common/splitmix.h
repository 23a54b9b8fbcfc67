#pragma once
// SplitMix64 (Steele, Lea, Flood 2014): a fast, well-mixed 64-bit hash of a counter. The
// deterministic source of every "random" value the real backends draw (parameter init, data
// sampling), so runs repeat exactly and do not depend on how work is split. Integer-only, so a
// CUDA kernel computes the same bits (core/data/init_generator.h).
#include <cstdint>

#include "core/common/host_device.h"

namespace fullshard {

FULLSHARD_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace fullshard
