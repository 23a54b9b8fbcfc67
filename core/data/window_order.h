#pragma once
// The order an epoch reads its windows in with training.data.sampling "shuffle".
//
// NOTE [Shuffled epochs]: each epoch reads every window of seq_len + 1 tokens exactly once, in an
// order drawn from (seed, epoch): window = shuffled_window(seed, epoch, i, windows) for the
// epoch's i-th sample. The permutation is a keyed Feistel network on the smallest power-of-4
// range holding `windows`, walked until it lands inside (cycle walking: a permutation of the
// larger range restricted to its cycle through i stays a permutation of [0, windows)). It costs
// O(1) memory and a few hashes per sample whatever the data size (a 10 GB shard has ~10^8
// windows; a stored permutation would be 800 MB per process), and it is a pure function, so the
// window of global sample k (NOTE [Token data sampling]) is the same on every mesh and a resume
// from a checkpoint's sample count continues the same permutation.
#include <cstdint>

namespace fullshard {

// The window the `index`-th sample of `epoch` reads; a permutation of [0, windows) over index for
// each (seed, epoch). Requires 0 <= index < windows.
int64_t shuffled_window(uint64_t seed, int64_t epoch, int64_t index, int64_t windows);

}  // namespace fullshard
