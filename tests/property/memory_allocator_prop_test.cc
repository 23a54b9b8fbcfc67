// Random malloc/free/empty_cache sequences over several streams against the caching allocator
// model: invariants that follow from NOTE [Caching allocator rules] hold after every step.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <vector>

#include "core/memory/caching_allocator.h"

namespace fullshard {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

enum class OpKind { kMalloc, kFree, kEmptyCache };

struct Op {
  OpKind kind = OpKind::kMalloc;
  StreamId stream = 0;
  uint64_t bytes = 0;
  size_t pick = 0;  // which live block a free releases (modulo the live count)
};

std::ostream& operator<<(std::ostream& os, const Op& op) {
  switch (op.kind) {
    case OpKind::kMalloc: return os << "malloc(" << op.bytes << ", stream " << op.stream << ")";
    case OpKind::kFree: return os << "free(pick " << op.pick << ")";
    case OpKind::kEmptyCache: return os << "empty_cache()";
  }
  return os;
}

rc::Gen<uint64_t> gen_bytes() {
  return rc::gen::weightedOneOf<uint64_t>({
      {3, rc::gen::inRange<uint64_t>(0, 4096)},
      {4, rc::gen::inRange<uint64_t>(0, 2 * kMiB)},
      {4, rc::gen::inRange<uint64_t>(kMiB, 24 * kMiB)},
      {2, rc::gen::inRange<uint64_t>(0, 100 * kMiB + 1)},
      {2, rc::gen::element<uint64_t>(0, 1, 512, 513, kMiB, kMiB + 1, 10 * kMiB - 1, 10 * kMiB,
                                     20 * kMiB, 20 * kMiB + 1, 40 * kMiB, 100 * kMiB)},
  });
}

rc::Gen<Op> gen_op() {
  return rc::gen::apply(
      [](OpKind kind, StreamId stream, uint64_t bytes, size_t pick) {
        return Op{kind, stream, bytes, pick};
      },
      rc::gen::weightedElement<OpKind>(
          {{12, OpKind::kMalloc}, {9, OpKind::kFree}, {1, OpKind::kEmptyCache}}),
      rc::gen::inRange<StreamId>(0, 3), gen_bytes(), rc::gen::inRange<size_t>(0, 1 << 20));
}

uint64_t rounded(uint64_t bytes) { return bytes == 0 ? 0 : (bytes + 511) / 512 * 512; }

// Page size of the pool a block of this size came from (expandable segments).
uint64_t page_of(const Block& b) {
  return rounded(b.requested_bytes) <= kMiB ? 2 * kMiB : 20 * kMiB;
}

void check_state(const CachingAllocator& a, const std::vector<Block>& live, bool after_empty) {
  a.check_invariants();
  const AllocatorStats& st = a.stats();
  const AllocatorOptions& opt = a.options();
  uint64_t allocated = 0, requested = 0;
  for (const Block& b : live) {
    RC_ASSERT(b.size >= rounded(b.requested_bytes));
    RC_ASSERT((b.size == 0) == (b.requested_bytes == 0));
    allocated += b.size;
    requested += b.requested_bytes;
  }
  RC_ASSERT(st.allocated_bytes == allocated);
  RC_ASSERT(st.requested_bytes == requested);
  RC_ASSERT(st.reserved_bytes >= st.allocated_bytes);
  RC_ASSERT(st.reserved_bytes <= opt.capacity_bytes);
  RC_ASSERT(st.peak_allocated_bytes >= st.allocated_bytes);
  RC_ASSERT(st.peak_reserved_bytes >= st.reserved_bytes);

  // Live blocks never overlap (on any stream: addresses are unique).
  std::vector<const Block*> sorted;
  for (const Block& b : live) {
    if (b.size > 0) sorted.push_back(&b);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Block* x, const Block* y) { return x->address < y->address; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    RC_ASSERT(sorted[i - 1]->address + sorted[i - 1]->size <= sorted[i]->address);
  }

  // Every live block lies inside one segment of its stream and pool; segments add up.
  const std::vector<SegmentInfo> segs = a.snapshot();
  uint64_t reserved = 0, seg_allocated = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    const SegmentInfo& s = segs[i];
    reserved += s.size;
    seg_allocated += s.allocated_bytes;
    if (i > 0) RC_ASSERT(segs[i - 1].address + segs[i - 1].size <= s.address);
    RC_ASSERT(s.is_expandable == opt.expandable_segments);
    if (opt.expandable_segments) {
      const uint64_t page = s.is_small ? 2 * kMiB : 20 * kMiB;
      RC_ASSERT(s.size % page == 0);
      RC_ASSERT(s.address % page == 0);
    } else if (s.is_small) {
      RC_ASSERT(s.size == 2 * kMiB);
    } else {
      RC_ASSERT(s.size % (2 * kMiB) == 0);
      RC_ASSERT(s.size >= 10 * kMiB);
    }
    if (after_empty && !opt.expandable_segments) RC_ASSERT(s.allocated_bytes > 0);
  }
  RC_ASSERT(reserved == st.reserved_bytes);
  RC_ASSERT(seg_allocated == st.allocated_bytes);
  if (!opt.expandable_segments) RC_ASSERT(segs.size() == st.num_segments);
  for (const Block* b : sorted) {
    auto it =
        std::upper_bound(segs.begin(), segs.end(), b->address,
                         [](uintptr_t addr, const SegmentInfo& s) { return addr < s.address; });
    RC_ASSERT(it != segs.begin());
    --it;
    RC_ASSERT(b->address + b->size <= it->address + it->size);
    RC_ASSERT(it->stream == b->stream);
    RC_ASSERT(it->is_small == (rounded(b->requested_bytes) <= kMiB));
  }

  // After empty_cache with expandable segments, exactly the pages under live blocks stay mapped.
  if (after_empty && opt.expandable_segments) {
    std::set<std::pair<uint64_t, uint64_t>> pages;  // (page size, page index)
    for (const Block* b : sorted) {
      const uint64_t page = page_of(*b);
      for (uint64_t p = b->address / page; p <= (b->address + b->size - 1) / page; ++p) {
        pages.emplace(page, p);
      }
    }
    uint64_t mapped = 0;
    for (const auto& [page, index] : pages) mapped += page;
    RC_ASSERT(st.reserved_bytes == mapped);
  }
}

struct Outcome {
  std::vector<std::optional<Block>> results;
  AllocatorStats stats;
};

// Runs ops on a fresh allocator; checks invariants after every step when `check` is set.
Outcome run(const AllocatorOptions& opt, const std::vector<Op>& ops, bool check) {
  CachingAllocator a(opt);
  std::vector<Block> live;
  Outcome out;
  for (const Op& op : ops) {
    bool after_empty = false;
    switch (op.kind) {
      case OpKind::kMalloc: {
        auto b = a.malloc(op.bytes, op.stream);
        out.results.push_back(b);
        if (b) {
          if (check) {
            RC_ASSERT(b->requested_bytes == op.bytes);
            RC_ASSERT(b->stream == op.stream);
          }
          live.push_back(*b);
        } else if (check) {
          RC_ASSERT(opt.capacity_bytes != kUnlimited);
        }
        break;
      }
      case OpKind::kFree:
        if (!live.empty()) {
          const size_t i = op.pick % live.size();
          a.free(live[i]);
          live[i] = live.back();
          live.pop_back();
        }
        break;
      case OpKind::kEmptyCache:
        a.empty_cache();
        after_empty = true;
        break;
    }
    if (check) check_state(a, live, after_empty);
  }
  if (check && opt.capacity_bytes == kUnlimited) {
    RC_ASSERT(a.stats().num_ooms == 0u);
    RC_ASSERT(a.stats().num_alloc_retries == 0u);
  }
  // Free everything and empty the cache: nothing stays reserved.
  for (const Block& b : live) a.free(b);
  a.empty_cache();
  out.stats = a.stats();
  if (check) {
    check_state(a, {}, true);
    RC_ASSERT(a.stats().reserved_bytes == 0u);
    RC_ASSERT(a.stats().allocated_bytes == 0u);
    RC_ASSERT(a.snapshot().empty());
  }
  return out;
}

rc::Gen<std::vector<Op>> gen_ops() {
  return rc::gen::mapcat(rc::gen::inRange<size_t>(0, 400),
                         [](size_t n) { return rc::gen::container<std::vector<Op>>(n, gen_op()); });
}

AllocatorOptions gen_options(bool expandable) {
  AllocatorOptions opt;
  opt.expandable_segments = expandable;
  opt.capacity_bytes = *rc::gen::element(kUnlimited, 48 * kMiB, 100 * kMiB, 160 * kMiB, 400 * kMiB);
  opt.max_split_size_bytes =
      *rc::gen::element(kUnlimited, kUnlimited, 20 * kMiB, 40 * kMiB, 64 * kMiB);
  return opt;
}

void check_deterministic(const AllocatorOptions& opt, const std::vector<Op>& ops) {
  const Outcome first = run(opt, ops, true);
  const Outcome second = run(opt, ops, false);
  RC_ASSERT(first.results.size() == second.results.size());
  for (size_t i = 0; i < first.results.size(); ++i) {
    const auto& x = first.results[i];
    const auto& y = second.results[i];
    RC_ASSERT(x.has_value() == y.has_value());
    if (x) {
      RC_ASSERT(x->address == y->address);
      RC_ASSERT(x->size == y->size);
      RC_ASSERT(x->id == y->id);
    }
  }
  RC_ASSERT(first.stats.peak_reserved_bytes == second.stats.peak_reserved_bytes);
  RC_ASSERT(first.stats.num_alloc_retries == second.stats.num_alloc_retries);
  RC_ASSERT(first.stats.num_ooms == second.stats.num_ooms);
  RC_CLASSIFY(first.stats.num_alloc_retries > 0, "alloc retry");
  RC_CLASSIFY(first.stats.num_ooms > 0, "oom");
  RC_CLASSIFY(first.stats.peak_reserved_bytes > 100 * kMiB, "peak reserved > 100 MiB");
}

RC_GTEST_PROP(CachingAllocatorProp, InvariantsHoldForCudaMallocSegments, ()) {
  const AllocatorOptions opt = gen_options(false);
  const auto ops = *gen_ops();
  check_deterministic(opt, ops);
}

RC_GTEST_PROP(CachingAllocatorProp, InvariantsHoldForExpandableSegments, ()) {
  const AllocatorOptions opt = gen_options(true);
  const auto ops = *gen_ops();
  check_deterministic(opt, ops);
}

// Without frees, a single-stream large-pool workload on expandable segments reserves exactly
// the pages its allocations need: reserved == allocated rounded up to 20 MiB pages.
RC_GTEST_PROP(CachingAllocatorProp, ExpandableReservesPagesForGrowingUse, ()) {
  AllocatorOptions opt;
  opt.expandable_segments = true;
  CachingAllocator a(opt);
  const auto sizes =
      *rc::gen::container<std::vector<uint64_t>>(rc::gen::inRange<uint64_t>(kMiB + 1, 64 * kMiB));
  for (uint64_t bytes : sizes) {
    RC_ASSERT(a.malloc(bytes, 0).has_value());
    const uint64_t allocated = a.stats().allocated_bytes;
    RC_ASSERT(a.stats().reserved_bytes == (allocated + 20 * kMiB - 1) / (20 * kMiB) * (20 * kMiB));
  }
}

}  // namespace
}  // namespace fullshard
