// MemoryTracker: byte-exact accounting by category on top of the caching allocator.
#include <gtest/gtest.h>

#include "core/common/error.h"
#include "core/memory/memory_tracker.h"

namespace fullshard {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

uint64_t bytes_of(const CategoryBytes& by, MemCategory c) { return by[static_cast<int>(c)]; }

TEST(MemoryTracker, CountsDeviceBytesPerCategoryAfterRounding) {
  MemoryTracker t;
  auto act = t.allocate(1000, MemCategory::kActivation, 0, 1);
  auto param = t.allocate(5 * kMiB, MemCategory::kShardedParam, 0, 2);
  ASSERT_TRUE(act && param);
  EXPECT_EQ(act->bytes, 1000u);
  EXPECT_EQ(act->block.size, 1024u);
  MemorySnapshot now = t.current();
  EXPECT_EQ(bytes_of(now.by_category, MemCategory::kActivation), 1024u);
  EXPECT_EQ(bytes_of(now.by_category, MemCategory::kShardedParam), 5 * kMiB);
  EXPECT_EQ(now.allocated_bytes, 5 * kMiB + 1024);
  EXPECT_EQ(now.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(t.live_buffers(), 2u);
  t.free(*act, 3);
  now = t.current();
  EXPECT_EQ(bytes_of(now.by_category, MemCategory::kActivation), 0u);
  EXPECT_EQ(now.allocated_bytes, 5 * kMiB);
  EXPECT_EQ(now.reserved_bytes, 22 * kMiB);  // cached
  EXPECT_EQ(t.live_buffers(), 1u);
}

TEST(MemoryTracker, PeakSnapshotsKeepTheirBreakdown) {
  MemoryTracker t;
  auto a = t.allocate(3 * kMiB, MemCategory::kShardedParam, 0, 1);  // 20 MiB segment
  auto b = t.allocate(5 * kMiB, MemCategory::kActivation, 0, 2);    // same segment
  ASSERT_TRUE(a && b);
  t.free(*b, 3);
  auto c = t.allocate(1 * kMiB, MemCategory::kTemporary, 0, 4);  // small pool: new 2 MiB
  ASSERT_TRUE(c);
  const MemorySnapshot& pa = t.at_peak_allocated();
  EXPECT_EQ(pa.host_seq, 2u);
  EXPECT_EQ(pa.allocated_bytes, 8 * kMiB);
  EXPECT_EQ(bytes_of(pa.by_category, MemCategory::kShardedParam), 3 * kMiB);
  EXPECT_EQ(bytes_of(pa.by_category, MemCategory::kActivation), 5 * kMiB);
  EXPECT_EQ(bytes_of(pa.by_category, MemCategory::kTemporary), 0u);
  const MemorySnapshot& pr = t.at_peak_reserved();
  EXPECT_EQ(pr.host_seq, 4u);
  EXPECT_EQ(pr.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(bytes_of(pr.by_category, MemCategory::kTemporary), 1 * kMiB);
  EXPECT_EQ(bytes_of(pr.by_category, MemCategory::kActivation), 0u);

  t.reset_peaks();
  EXPECT_EQ(t.at_peak_allocated().allocated_bytes, 4 * kMiB);
  EXPECT_EQ(t.allocator_stats().peak_allocated_bytes, 4 * kMiB);
}

TEST(MemoryTracker, HostBuffersAreCountedSeparatelyAndExactly) {
  MemoryTracker t;
  Buffer h = t.allocate_host(1001, MemCategory::kOptimizerState, 1);
  EXPECT_TRUE(h.on_host);
  EXPECT_NE(h.id, 0u);
  EXPECT_EQ(t.current().host_bytes, 1001u);  // no rounding on the host
  EXPECT_EQ(t.current().allocated_bytes, 0u);
  EXPECT_EQ(t.current().reserved_bytes, 0u);
  EXPECT_EQ(bytes_of(t.current().by_category, MemCategory::kOptimizerState), 0u);
  auto d = t.allocate(1001, MemCategory::kOptimizerState, 0, 2);
  ASSERT_TRUE(d);
  EXPECT_NE(d->id, h.id);
  t.free(h, 3);
  EXPECT_EQ(t.current().host_bytes, 0u);
  EXPECT_EQ(t.peak_host_bytes(), 1001u);
  EXPECT_EQ(bytes_of(t.current().by_category, MemCategory::kOptimizerState), 1024u);
}

TEST(MemoryTracker, TimelineRecordsEveryEventInOrder) {
  MemoryTracker t;
  auto a = t.allocate(2 * kMiB, MemCategory::kAllGather, 1, 10);
  Buffer h = t.allocate_host(64, MemCategory::kShardedParam, 11);
  t.free(*a, 12);
  t.free(h, 13);
  const auto& tl = t.timeline();
  ASSERT_EQ(tl.size(), 4u);
  EXPECT_TRUE(tl[0].is_alloc);
  EXPECT_EQ(tl[0].host_seq, 10u);
  EXPECT_EQ(tl[0].buffer_id, a->id);
  EXPECT_EQ(tl[0].category, MemCategory::kAllGather);
  EXPECT_EQ(tl[0].allocated_bytes, 2 * kMiB);
  EXPECT_EQ(tl[0].reserved_bytes, 20 * kMiB);
  EXPECT_EQ(bytes_of(tl[0].by_category, MemCategory::kAllGather), 2 * kMiB);
  EXPECT_EQ(tl[1].host_bytes, 64u);
  EXPECT_FALSE(tl[2].is_alloc);
  EXPECT_EQ(tl[2].allocated_bytes, 0u);
  EXPECT_EQ(tl[2].reserved_bytes, 20 * kMiB);
  EXPECT_EQ(tl[3].host_bytes, 0u);
  EXPECT_EQ(tl[3].host_seq, 13u);

  MemoryTracker quiet({}, nullptr, /*record_timeline=*/false);
  auto q = quiet.allocate(100, MemCategory::kTemporary, 0, 1);
  ASSERT_TRUE(q);
  quiet.free(*q, 2);
  EXPECT_TRUE(quiet.timeline().empty());
  EXPECT_EQ(quiet.at_peak_allocated().allocated_bytes, 512u);
}

TEST(MemoryTracker, OutOfMemoryIsReportedNotThrown) {
  AllocatorOptions o;
  o.capacity_bytes = 16 * kMiB;
  MemoryTracker t(o);
  EXPECT_EQ(t.capacity_bytes(), 16 * kMiB);
  EXPECT_FALSE(t.allocate(30 * kMiB, MemCategory::kActivation, 0, 1).has_value());
  EXPECT_EQ(t.allocator_stats().num_ooms, 1u);
  EXPECT_EQ(t.live_buffers(), 0u);
  EXPECT_TRUE(t.timeline().empty());
}

}  // namespace
}  // namespace fullshard
