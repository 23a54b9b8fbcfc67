// Hand-computed cases for the caching allocator model. See NOTE [Caching allocator rules] in
// core/memory/caching_allocator.cc for the rules each case pins down.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/common/error.h"
#include "core/memory/caching_allocator.h"

namespace fullshard {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;

Block must(CachingAllocator& a, uint64_t bytes, StreamId stream = 0) {
  auto b = a.malloc(bytes, stream);
  EXPECT_TRUE(b.has_value()) << "malloc(" << bytes << ") failed";
  a.check_invariants();
  return b.value_or(Block{});
}

AllocatorOptions capacity(uint64_t bytes) {
  AllocatorOptions o;
  o.capacity_bytes = bytes;
  return o;
}

AllocatorOptions expandable(uint64_t capacity_bytes = std::numeric_limits<uint64_t>::max()) {
  AllocatorOptions o;
  o.capacity_bytes = capacity_bytes;
  o.expandable_segments = true;
  return o;
}

// ------------------------------------------------------------------ rounding and segment sizes

TEST(CachingAllocator, RoundsRequestsTo512Bytes) {
  CachingAllocator a;
  Block b1 = must(a, 1);
  Block b2 = must(a, 513);
  Block b3 = must(a, 512);
  EXPECT_EQ(b1.size, 512u);
  EXPECT_EQ(b1.requested_bytes, 1u);
  EXPECT_EQ(b2.size, 1024u);
  EXPECT_EQ(b3.size, 512u);
  // Carved one after another from the front of one 2 MiB small segment.
  EXPECT_EQ(b2.address, b1.address + 512);
  EXPECT_EQ(b3.address, b2.address + 1024);
  EXPECT_EQ(a.stats().allocated_bytes, 2048u);
  EXPECT_EQ(a.stats().requested_bytes, 1u + 513u + 512u);
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(a.stats().num_segments, 1u);
}

TEST(CachingAllocator, ZeroByteRequestAllocatesNothing) {
  CachingAllocator a;
  Block z1 = must(a, 0);
  Block z2 = must(a, 0, 3);
  EXPECT_EQ(z1.size, 0u);
  EXPECT_NE(z1.id, 0u);
  EXPECT_NE(z1.id, z2.id);
  EXPECT_EQ(z2.stream, 3u);
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
  a.free(z1);
  a.free(z2);
  a.check_invariants();
  EXPECT_EQ(a.stats().num_segments, 0u);
}

TEST(CachingAllocator, SmallRequestReservesA2MiBSegment) {
  CachingAllocator a;
  must(a, 1000);
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);
  must(a, 1 * kMiB);  // still small (<= 1 MiB) and fits in the same segment
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);
  must(a, 1 * kMiB);  // 1 KiB + 1 MiB used: a second 2 MiB segment
  EXPECT_EQ(a.stats().reserved_bytes, 4 * kMiB);
  EXPECT_EQ(a.stats().num_segments, 2u);
}

TEST(CachingAllocator, SegmentSizesFollowGetAllocationSize) {
  struct Case {
    uint64_t request;
    uint64_t reserved;
  };
  const std::vector<Case> cases = {
      {1 * kMiB + 1, 20 * kMiB},     // smallest large request: a 20 MiB segment
      {5 * kMiB, 20 * kMiB},         // 1..10 MiB: 20 MiB
      {10 * kMiB - 512, 20 * kMiB},  // just under kMinLargeAlloc
      {10 * kMiB, 10 * kMiB},        // >= 10 MiB: rounded up to 2 MiB
      {30 * kMiB + 1, 32 * kMiB},    // 30 MiB + 512 B -> 32 MiB
      {100 * kMiB + 7, 102 * kMiB},
  };
  for (const Case& c : cases) {
    CachingAllocator a;
    must(a, c.request);
    EXPECT_EQ(a.stats().reserved_bytes, c.reserved) << "request " << c.request;
    EXPECT_EQ(a.stats().num_segments, 1u);
  }
}

// ------------------------------------------------------------------ reuse, streams, splitting

TEST(CachingAllocator, ReusesFreedBlockOnTheSameStream) {
  CachingAllocator a;
  Block x = must(a, 5 * kMiB);
  a.free(x);
  Block y = must(a, 5 * kMiB);
  EXPECT_EQ(y.address, x.address);
  EXPECT_NE(y.id, x.id);
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
  EXPECT_EQ(a.stats().peak_reserved_bytes, 20 * kMiB);
}

TEST(CachingAllocator, DoesNotReuseAcrossStreams) {
  CachingAllocator a;
  Block x = must(a, 5 * kMiB, 0);
  a.free(x);
  Block y = must(a, 5 * kMiB, 1);
  EXPECT_NE(y.address, x.address);
  EXPECT_EQ(a.stats().reserved_bytes, 40 * kMiB);
  EXPECT_EQ(a.stats().num_segments, 2u);
  Block s = must(a, 100, 2);  // the small pool is per stream too
  a.free(s);
  must(a, 100, 3);
  EXPECT_EQ(a.stats().reserved_bytes, 44 * kMiB);
}

TEST(CachingAllocator, Splits20MiBSegmentForTwo5MiBRequests) {
  CachingAllocator a;
  Block x = must(a, 5 * kMiB);
  Block y = must(a, 5 * kMiB);
  EXPECT_EQ(y.address, x.address + 5 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
  EXPECT_EQ(a.stats().allocated_bytes, 10 * kMiB);
  EXPECT_EQ(a.stats().num_segments, 1u);
}

TEST(CachingAllocator, LargePoolDoesNotSplitRemainderOfAtMost1MiB) {
  CachingAllocator a;
  Block x = must(a, 19 * kMiB);  // 20 MiB segment, remainder exactly 1 MiB: not split
  EXPECT_EQ(x.size, 20 * kMiB);
  EXPECT_EQ(a.stats().allocated_bytes, 20 * kMiB);
  EXPECT_EQ(a.stats().requested_bytes, 19 * kMiB);
  must(a, 1 * kMiB + 512);  // nothing left to split off: a new segment
  EXPECT_EQ(a.stats().reserved_bytes, 40 * kMiB);

  CachingAllocator b;
  Block y = must(b, 18 * kMiB + 512 * kKiB);  // remainder 1.5 MiB > 1 MiB: split
  EXPECT_EQ(y.size, 18 * kMiB + 512 * kKiB);
  Block z = must(b, 1 * kMiB + 512);  // takes the 1.5 MiB remainder whole (0.5 MiB left)
  EXPECT_EQ(z.address, y.address + y.size);
  EXPECT_EQ(z.size, 1 * kMiB + 512 * kKiB);
  EXPECT_EQ(b.stats().reserved_bytes, 20 * kMiB);
}

TEST(CachingAllocator, SmallPoolSplitsAnyRemainderOf512Bytes) {
  CachingAllocator a;
  Block x = must(a, 2 * kMiB - 512 - 1024 * kKiB);  // ~0.999 MiB
  Block y = must(a, 1 * kMiB);
  Block z = must(a, 512);  // the last 512 B of the segment
  EXPECT_EQ(z.address, y.address + y.size);
  EXPECT_EQ(x.size + y.size + z.size, 2 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFittingBlock) {
  CachingAllocator a;
  Block big = must(a, 12 * kMiB);   // its own 12 MiB segment
  Block mid = must(a, 6 * kMiB);    // 20 MiB segment, 14 MiB left
  Block rest = must(a, 14 * kMiB);  // fills the 20 MiB segment exactly
  a.free(big);
  a.free(mid);
  Block c = must(a, 5 * kMiB);  // 6 MiB block beats the 12 MiB one
  EXPECT_EQ(c.address, mid.address);
  EXPECT_EQ(c.size, 6 * kMiB);  // remainder 1 MiB: not split
  Block d = must(a, 7 * kMiB);
  EXPECT_EQ(d.address, big.address);
  a.free(rest);
  EXPECT_EQ(a.stats().reserved_bytes, 32 * kMiB);
}

TEST(CachingAllocator, FreedNeighboursMerge) {
  CachingAllocator a;
  Block x = must(a, 5 * kMiB);
  Block y = must(a, 5 * kMiB);
  Block z = must(a, 5 * kMiB);  // 5 MiB remainder after it
  a.free(y);
  a.free(x);  // merges with y: 10 MiB free at x's address
  a.check_invariants();
  Block w = must(a, 10 * kMiB);
  EXPECT_EQ(w.address, x.address);
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
  a.empty_cache();  // z and w still live: the segment is partly used and stays
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
  a.free(w);
  a.free(z);  // merges with both sides back into one unsplit 20 MiB block
  const auto segs = a.snapshot();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].size, 20 * kMiB);
  EXPECT_EQ(segs[0].allocated_bytes, 0u);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(a.stats().num_segments, 0u);
  EXPECT_EQ(a.stats().peak_reserved_bytes, 20 * kMiB);
}

// ------------------------------------------------------------------ out of memory

TEST(CachingAllocator, OomReleasesCachedSegmentsThenRetries) {
  CachingAllocator a(capacity(64 * kMiB));
  Block x = must(a, 40 * kMiB, 0);
  a.free(x);
  // 40 + 30 > 64: the cached 40 MiB segment of stream 0 is released, then the retry succeeds.
  Block y = must(a, 30 * kMiB, 1);
  EXPECT_EQ(a.stats().reserved_bytes, 30 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  EXPECT_EQ(a.stats().num_ooms, 0u);
  EXPECT_EQ(a.stats().num_segments, 1u);
  // 30 live + 40 > 64 and nothing is cached: out of memory (the retry still counts).
  EXPECT_FALSE(a.malloc(40 * kMiB, 1).has_value());
  EXPECT_EQ(a.stats().num_ooms, 1u);
  EXPECT_EQ(a.stats().num_alloc_retries, 2u);
  EXPECT_EQ(a.stats().reserved_bytes, 30 * kMiB);
  a.check_invariants();
  a.free(y);
  EXPECT_TRUE(a.malloc(40 * kMiB, 1).has_value());  // reuses nothing: 30 + 40 > 64 -> release
  EXPECT_EQ(a.stats().reserved_bytes, 40 * kMiB);
}

TEST(CachingAllocator, OomNeverReleasesPartlyUsedSegments) {
  CachingAllocator a(capacity(40 * kMiB));
  Block x = must(a, 5 * kMiB);
  must(a, 5 * kMiB);  // same 20 MiB segment, stays live
  a.free(x);
  EXPECT_FALSE(a.malloc(25 * kMiB, 0).has_value());  // 20 + 26 > 40, the split segment stays
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
  EXPECT_EQ(a.stats().num_ooms, 1u);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  must(a, 10 * kMiB);  // the 10 MiB tail of the segment fits exactly
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
}

TEST(CachingAllocator, RequestsOfAnExabyteAreOom) {
  CachingAllocator a;
  EXPECT_FALSE(a.malloc(uint64_t{1} << 60, 0).has_value());
  EXPECT_EQ(a.stats().num_ooms, 1u);
}

// ------------------------------------------------------------------ max_split_size

AllocatorOptions max_split(uint64_t bytes, uint64_t capacity_bytes = ~uint64_t{0}) {
  AllocatorOptions o;
  o.max_split_size_bytes = bytes;
  o.capacity_bytes = capacity_bytes;
  return o;
}

TEST(CachingAllocator, OversizeBlocksAreNeverSplit) {
  CachingAllocator a(max_split(40 * kMiB));
  Block x = must(a, 60 * kMiB);
  a.free(x);
  // 45 >= max_split and 60 < 45 + 20: the cached block is taken whole, 15 MiB left unsplit.
  Block y = must(a, 45 * kMiB);
  EXPECT_EQ(y.address, x.address);
  EXPECT_EQ(y.size, 60 * kMiB);
  EXPECT_EQ(a.stats().allocated_bytes, 60 * kMiB);
  EXPECT_EQ(a.stats().requested_bytes, 45 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 60 * kMiB);
}

TEST(CachingAllocator, SmallerRequestsNeverTakeOversizeBlocks) {
  CachingAllocator a(max_split(40 * kMiB));
  a.free(must(a, 60 * kMiB));
  Block y = must(a, 10 * kMiB);  // < max_split: may not use the 60 MiB block
  EXPECT_EQ(y.size, 10 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 70 * kMiB);
  Block z = must(a, 40 * kMiB);  // oversize, but 60 >= 40 + 20: too wasteful
  EXPECT_EQ(z.size, 40 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 110 * kMiB);
  Block w = must(a, 41 * kMiB);  // 60 < 41 + 20: taken
  EXPECT_EQ(w.size, 60 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 110 * kMiB);
}

TEST(CachingAllocator, OomFreesOversizeBlocksBeforeEverythingElse) {
  CachingAllocator a(max_split(40 * kMiB, 100 * kMiB));
  a.free(must(a, 80 * kMiB));
  Block small = must(a, 5 * kMiB);  // 20 MiB segment: 100 MiB reserved
  a.free(small);
  // 80 >= 45 + 20 so the cached block does not serve it; 100 + 46 > 100. The oversize 80 MiB
  // block is released (release_available_cached_blocks) and the plain retry succeeds, without
  // touching the cached 20 MiB segment and without counting an alloc retry.
  Block y = must(a, 45 * kMiB);
  EXPECT_EQ(y.size, 46 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 66 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 0u);
  EXPECT_EQ(a.stats().num_segments, 2u);
}

TEST(CachingAllocator, RejectsMaxSplitSizesPyTorchRejects) {
  EXPECT_THROW({ CachingAllocator a(max_split(10 * kMiB)); }, InputError);
  EXPECT_THROW({ CachingAllocator a(max_split(30 * kMiB + 1)); }, InputError);
  EXPECT_NO_THROW({ CachingAllocator a(max_split(20 * kMiB)); });
}

// ------------------------------------------------------------------ expandable segments

TEST(CachingAllocator, ExpandableMapsPagesOnDemand) {
  CachingAllocator a(expandable());
  Block s = must(a, 1000);
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);  // one 2 MiB small page
  Block x = must(a, 5 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 22 * kMiB);  // one 20 MiB large page
  Block y = must(a, 5 * kMiB);
  EXPECT_EQ(y.address, x.address + 5 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 22 * kMiB);
  // 10 MiB free at the end of the mapped range is too small: one more page is mapped and the
  // allocation continues right after y, across the page boundary.
  Block z = must(a, 12 * kMiB);
  EXPECT_EQ(z.address, y.address + 5 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, 42 * kMiB);
  EXPECT_EQ(a.stats().num_segments, 2u);  // one per (stream, pool)
  const auto segs = a.snapshot();
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(s.size, 1024u);
  EXPECT_EQ(a.stats().allocated_bytes, 1024 + 22 * kMiB);
}

TEST(CachingAllocator, ExpandableReservedTracksPeakToPageGranularity) {
  CachingAllocator a(expandable());
  std::vector<Block> live;
  for (int i = 0; i < 6; ++i) live.push_back(must(a, 7 * kMiB));
  EXPECT_EQ(a.stats().reserved_bytes, 60 * kMiB);  // 42 MiB live -> 3 pages
  for (const Block& b : live) a.free(b);
  EXPECT_EQ(a.stats().reserved_bytes, 60 * kMiB);  // cached until OOM or empty_cache

  // Growing requests that cudaMalloc would give separate segments reuse one range.
  CachingAllocator e(expandable());
  CachingAllocator c;
  for (uint64_t mib : {15, 16, 17}) {
    e.free(must(e, mib * kMiB));
    c.free(must(c, mib * kMiB));
  }
  EXPECT_EQ(e.stats().reserved_bytes, 20 * kMiB);
  EXPECT_EQ(c.stats().reserved_bytes, 34 * kMiB);  // 16 MiB (reused for 16) + 18 MiB
}

TEST(CachingAllocator, ExpandableOomUnmapsFreePagesAndRetries) {
  CachingAllocator a(expandable(64 * kMiB));
  Block x = must(a, 40 * kMiB, 0);
  a.free(x);
  Block y = must(a, 40 * kMiB, 1);  // 40 + 40 > 64: stream 0's pages are unmapped first
  EXPECT_EQ(a.stats().reserved_bytes, 40 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  EXPECT_EQ(a.stats().num_segments, 1u);  // stream 0's segment had nothing left: released
  a.free(y);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
}

TEST(CachingAllocator, ExpandableOomKeepsPartialPagesNextToLiveBlocks) {
  CachingAllocator a(expandable(64 * kMiB));
  Block x = must(a, 30 * kMiB, 0);  // pages 0-1 of stream 0
  Block y = must(a, 5 * kMiB, 0);   // [30, 35) MiB
  a.free(x);
  // 40 + 40 > 64: page 0 is wholly free and is unmapped; page 1 holds y and stays.
  Block z = must(a, 40 * kMiB, 1);
  EXPECT_EQ(a.stats().reserved_bytes, 60 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  auto segs = a.snapshot();
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].address, x.address + 20 * kMiB);
  EXPECT_EQ(segs[0].size, 20 * kMiB);
  EXPECT_EQ(segs[0].allocated_bytes, 5 * kMiB);
  // The hole at page 0 is filled again before the segment would grow at its end: mapping page
  // 0 (60 + 20 > 64) first needs stream 1's free pages unmapped, and the new page merges with
  // the free 10 MiB after it.
  a.free(z);
  Block w = must(a, 18 * kMiB, 0);
  EXPECT_EQ(w.address, x.address);
  EXPECT_EQ(a.stats().reserved_bytes, 40 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 2u);
  EXPECT_EQ(a.stats().num_segments, 1u);
  segs = a.snapshot();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].size, 40 * kMiB);
  EXPECT_EQ(segs[0].allocated_bytes, 23 * kMiB);
  (void)y;
}

TEST(CachingAllocator, ExpandableEmptyCacheUnmapsEveryFreePage) {
  CachingAllocator a(expandable());
  Block x = must(a, 30 * kMiB);
  Block y = must(a, 5 * kMiB);
  a.free(x);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);  // only the page under y
  a.free(y);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(a.stats().num_segments, 0u);
}

// ------------------------------------------------------------------ stats and misc

TEST(CachingAllocator, ResetPeakStatsSetsPeaksToCurrent) {
  CachingAllocator a;
  Block x = must(a, 30 * kMiB);
  a.free(x);
  EXPECT_EQ(a.stats().peak_allocated_bytes, 30 * kMiB);
  a.empty_cache();
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().peak_allocated_bytes, 0u);
  EXPECT_EQ(a.stats().peak_reserved_bytes, 0u);
  must(a, 1);
  EXPECT_EQ(a.stats().peak_allocated_bytes, 512u);
  EXPECT_EQ(a.stats().peak_reserved_bytes, 2 * kMiB);
}

TEST(CachingAllocator, DoubleFreeIsAnInternalError) {
  CachingAllocator a;
  Block x = must(a, 100);
  a.free(x);
  EXPECT_THROW(a.free(x), InternalError);
}

// A source that hands out fake addresses and fails past a byte limit.
class FakeSource : public SegmentSource {
 public:
  explicit FakeSource(uint64_t limit) : limit_(limit) {}
  std::optional<uintptr_t> map(uint64_t bytes) override {
    if (mapped_ + bytes > limit_) return std::nullopt;
    mapped_ += bytes;
    uintptr_t addr = next_;
    next_ += bytes + 4096;  // leave gaps: addresses are the source's, not the allocator's
    live_[addr] = bytes;
    ++maps;
    return addr;
  }
  void unmap(uintptr_t address, uint64_t bytes) override {
    auto it = live_.find(address);
    ASSERT_NE(it, live_.end());
    ASSERT_EQ(it->second, bytes);
    live_.erase(it);
    mapped_ -= bytes;
    ++unmaps;
  }
  uint64_t mapped() const { return mapped_; }
  int maps = 0;
  int unmaps = 0;

 private:
  uint64_t limit_;
  uint64_t mapped_ = 0;
  uintptr_t next_ = 0x10000000;
  std::map<uintptr_t, uint64_t> live_;
};

TEST(CachingAllocator, SegmentSourceProvidesAndReclaimsSegments) {
  FakeSource src(30 * kMiB);
  {
    CachingAllocator a({}, &src);
    Block x = must(a, 5 * kMiB);
    EXPECT_EQ(x.address, 0x10000000u);
    EXPECT_EQ(src.mapped(), 20 * kMiB);
    EXPECT_FALSE(a.malloc(20 * kMiB, 1).has_value());  // source says no; nothing to release
    EXPECT_EQ(a.stats().num_ooms, 1u);
    a.free(x);
    Block y = must(a, 20 * kMiB, 1);  // source says no, cache released, retry works
    EXPECT_EQ(src.unmaps, 1);
    EXPECT_EQ(y.size, 20 * kMiB);
    EXPECT_EQ(src.mapped(), 20 * kMiB);
    EXPECT_EQ(a.stats().reserved_bytes, 20 * kMiB);
  }
  EXPECT_EQ(src.mapped(), 0u);  // the destructor returns live segments too
}

TEST(CachingAllocator, SegmentSourceBacksExpandablePages) {
  FakeSource src(100 * kMiB);
  {
    CachingAllocator a(expandable(), &src);
    must(a, 100);
    must(a, 25 * kMiB);
    EXPECT_EQ(src.maps, 3);  // one small page, two large pages
    EXPECT_EQ(src.mapped(), 42 * kMiB);
    EXPECT_EQ(a.stats().reserved_bytes, 42 * kMiB);
  }
  EXPECT_EQ(src.mapped(), 0u);
}

}  // namespace
}  // namespace fullshard
