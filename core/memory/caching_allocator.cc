#include "core/memory/caching_allocator.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/common/error.h"

// NOTE [Caching allocator rules]
// A block-for-block model of DeviceCachingAllocator in PyTorch's
// c10/cuda/CUDACachingAllocator.cpp (read at pytorch/pytorch@001074d2; function names below are
// PyTorch's). No CUDA calls: cudaMalloc/cudaFree and cuMemMap/cuMemUnmap become "reserved +
// bytes <= capacity_bytes" plus SegmentSource::map/unmap, or bump-allocated virtual addresses.
//
//  1. Rounding (round_size): a request rounds up to a multiple of kMinBlockSize = 512 B.
//     roundup_power2_divisions is not modelled. A 0-byte request never reaches the device
//     allocator (NativeCachingAllocator::allocate skips malloc for size 0): it gets an id and
//     size 0 and changes nothing.
//  2. Pools (get_pool): rounded size <= kSmallSize (1 MiB) -> small pool, else large. Free blocks
//     sit in one std::set per pool ordered by (stream, size, address) (BlockComparatorSize), so
//     a block freed on stream S is only ever reused by stream S.
//  3. Best fit (get_free_block): lower_bound(stream, size) is the smallest cached block of the
//     stream that fits; ties go to the lowest address. max_split_size (max_split_size_mb): a
//     request < max_split never takes a block >= max_split; a request >= max_split takes a
//     block only if block < request + kLargeBuffer (20 MiB).
//  4. Split (should_split): small pool or expandable segments -> split when the remainder is
//     >= 512 B; large pool -> split when request < max_split and remainder > kSmallSize (1 MiB).
//     An unsplit block is handed out whole and counts whole in allocated bytes (Block::size is
//     the block's size, as PyTorch's allocated_bytes stat counts block->size).
//  5. Free (free_block): the block merges with its free neighbours in the same segment
//     (try_merge_blocks) and returns to its stream's pool. Segments are never released on free.
//     record_stream / cross-stream events are not modelled (FSDP2 does not use them).
//  6. New segment (alloc_block, get_allocation_size): <= 1 MiB -> 2 MiB (kSmallBuffer);
//     < 10 MiB (kMinLargeAlloc) -> 20 MiB (kLargeBuffer); else rounded up to 2 MiB (kRoundLarge).
//     It fails when reserved + size > capacity_bytes or SegmentSource::map returns nullopt.
//  7. OOM path (malloc): alloc_block || (release_available_cached_blocks && alloc_block) ||
//     (release_cached_blocks && alloc_block(isRetry)) || OOM. release_available_cached_blocks
//     only runs with max_split set: it frees the smallest oversize cached block of the stream
//     that is >= max(request, max_split), or else the largest oversize blocks of the stream
//     until that many bytes are freed (returning false if it could not free enough).
//     release_cached_blocks (also empty_cache, emptyCache) frees every unsplit cached segment of
//     every stream and pool; partly used (split) segments are never released. The retry bumps
//     num_alloc_retries even when it then fails; the failure bumps num_ooms.
//     garbage_collection_threshold and memory fractions are not modelled.
//  8. Expandable segments (Note [Expandable Segments], ExpandableSegment, find_expandable_block,
//     map_block, try_allocate_expandable_block, unmap_block, release_blocks):
//     - A segment reserves address space of 9/8 x device memory (capacity_bytes, or 1 TiB when
//       capacity is unlimited) rounded up to whole pages and maps physical pages on demand.
//       Page size = PyTorch's ExpandableSegment segment_size_: kSmallBuffer = 2 MiB for the
//       small pool and kLargeBuffer = 20 MiB for the large pool. reserved = mapped pages.
//     - The address space is a list of blocks: allocated, free (mapped) and unmapped; unmapped
//       blocks sit in a per-pool set ordered by (stream, address) and are page-aligned.
//     - Best fit (get_free_block) treats a free block followed by unmapped space as being as big
//       as both ("expandable_size"): from the lower_bound block it moves on to the next bigger
//       block while that one's expandable size is smaller.
//     - If no free block fits, find_expandable_block takes the lowest-address unmapped block of
//       the stream (including the free block right before it) with enough free+unmapped room;
//       if none, a new segment is reserved. Then just enough whole pages are mapped at its
//       start (map_block); newly mapped memory merges with free neighbours. A segment grows at
//       its end, or fills a hole left by an earlier unmap. Only the rounded request is mapped
//       (never get_allocation_size). Any remainder >= 512 B is split off.
//     - On OOM (and empty_cache), release_cached_blocks unmaps every whole page inside every
//       free block of every stream (not only at the end of a segment); a segment with nothing
//       mapped left is released. Partial pages next to live blocks stay mapped.
//     - release_available_cached_blocks is skipped: PyTorch's release_block cannot free an
//       expandable block (it asserts), so only the release_cached_blocks retry applies.
//     - num_segments counts reserved expandable segments (PyTorch's `segment` stat does not
//       count them; its snapshot lists one segment per contiguous mapped range, as snapshot()
//       here does).
//  9. Stats: allocated/requested bytes of live blocks, reserved bytes of segments (mapped
//     pages), their peaks (reset_peak_stats sets them to the current values), num_segments,
//     num_alloc_retries, num_ooms. Requests >= 1 EiB are an OOM without retry (allocate()).
// Addresses: without a SegmentSource every segment gets fresh virtual addresses from a bump
// pointer (never reused), aligned to 2 MiB, and expandable segments to their page size, so a
// run is deterministic. With a source, classic segments live where source->map puts them;
// expandable segments live in address space the source reserves when it can (NOTE [Expandable
// segments with real memory]); otherwise they use virtual addresses and map each page through the
// source (one map(page) per page, like one cuMemCreate handle per page), since a SegmentSource
// cannot map at a chosen address.

namespace fullshard {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMinBlockSize = 512;
constexpr uint64_t kSmallSize = 1 * kMiB;
constexpr uint64_t kSmallBuffer = 2 * kMiB;
constexpr uint64_t kLargeBuffer = 20 * kMiB;
constexpr uint64_t kMinLargeAlloc = 10 * kMiB;
constexpr uint64_t kRoundLarge = 2 * kMiB;
constexpr uint64_t kNoMaxSplit = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kMaxRequest = uint64_t{1} << 60;  // PyTorch refuses >= 1 EiB
constexpr uint64_t kUnlimitedDeviceBytes = uint64_t{1} << 40;
constexpr uintptr_t kVirtualBase = uintptr_t{1} << 40;
constexpr size_t kBlocksPerChunk = 1024;

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

uint64_t round_size(uint64_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

uint64_t allocation_size(uint64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

}  // namespace

struct CachingAllocator::Impl {
  struct Segment;
  struct Blk {
    uintptr_t addr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
    uint64_t id = 0;
    StreamId stream = 0;
    bool allocated = false;
    bool mapped = true;
    Blk* prev = nullptr;
    Blk* next = nullptr;
    Segment* seg = nullptr;
    bool is_split() const { return prev != nullptr || next != nullptr; }
  };
  struct BySize {
    bool operator()(const Blk* a, const Blk* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->addr < b->addr;
    }
  };
  struct ByAddr {
    bool operator()(const Blk* a, const Blk* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      return a->addr < b->addr;
    }
  };
  struct Pool {
    bool small = false;
    std::set<Blk*, BySize> blocks;    // free, mapped
    std::set<Blk*, ByAddr> unmapped;  // expandable address space without pages
  };
  struct Segment {
    uintptr_t base = 0;
    uint64_t size = 0;  // cudaMalloc size, or reserved address space when expandable
    StreamId stream = 0;
    Pool* pool = nullptr;
    bool expandable = false;
    uint64_t page = 0;  // expandable only
    Blk* head = nullptr;
    std::map<uint64_t, uintptr_t> source_pages;  // expandable with a source: page -> address
    bool source_reserved = false;  // expandable: the source reserved [base, base + size)
  };

  AllocatorOptions opt;
  SegmentSource* source = nullptr;
  AllocatorStats stats;
  Pool small_pool;
  Pool large_pool;
  std::map<uintptr_t, std::unique_ptr<Segment>> segments;  // by base address
  std::unordered_map<uint64_t, Blk*> live;                 // by Block::id
  uint64_t next_id = 1;
  uintptr_t next_va = kVirtualBase;
  std::vector<std::unique_ptr<Blk[]>> chunks;
  std::vector<Blk*> spare;

  Impl(AllocatorOptions o, SegmentSource* s) : opt(o), source(s) {
    small_pool.small = true;
    if (opt.max_split_size_bytes != kNoMaxSplit &&
        (opt.max_split_size_bytes < kLargeBuffer || opt.max_split_size_bytes % kMiB != 0)) {
      throw InputError("allocator.max_split_size_bytes",
                       "is " + std::to_string(opt.max_split_size_bytes) +
                           " bytes; PyTorch's max_split_size_mb is a whole number of MiB >= 20",
                       "use a multiple of 1048576 that is at least 20971520, or leave it unset");
    }
  }

  ~Impl() {
    if (source == nullptr) return;
    for (auto& [base, seg] : segments) {
      if (!seg->expandable) {
        source->unmap(seg->base, seg->size);
      } else if (seg->source_reserved) {
        for (auto& [page, addr] : seg->source_pages) source->decommit(addr, seg->page);
        source->release(seg->base, seg->size);
      } else {
        for (auto& [page, addr] : seg->source_pages) source->unmap(addr, seg->page);
      }
    }
  }

  // ---------------------------------------------------------------- block storage and lists

  Blk* new_blk() {
    if (spare.empty()) {
      chunks.push_back(std::make_unique<Blk[]>(kBlocksPerChunk));
      for (size_t i = kBlocksPerChunk; i-- > 0;) spare.push_back(&chunks.back()[i]);
    }
    Blk* b = spare.back();
    spare.pop_back();
    *b = Blk{};
    return b;
  }
  void delete_blk(Blk* b) { spare.push_back(b); }

  Pool& pool_of(const Blk* b) { return *b->seg->pool; }

  // Links n into b's segment right before b.
  void link_before(Blk* b, Blk* n) {
    n->prev = b->prev;
    n->next = b;
    if (b->prev) b->prev->next = n;
    b->prev = n;
    if (b->seg->head == b) b->seg->head = n;
  }
  // Links n into b's segment right after b.
  void link_after(Blk* b, Blk* n) {
    n->prev = b;
    n->next = b->next;
    if (b->next) b->next->prev = n;
    b->next = n;
  }
  void unlink(Blk* b) {
    if (b->prev) b->prev->next = b->next;
    if (b->next) b->next->prev = b->prev;
    if (b->seg->head == b) b->seg->head = b->next;
  }

  // try_merge_blocks: dst (in no set) absorbs its neighbour src when src is free and has the
  // same mapped state. src leaves its set and is deleted.
  void try_merge(Blk* dst, Blk* src) {
    if (src == nullptr || src->allocated || src->mapped != dst->mapped) return;
    Pool& pool = pool_of(src);
    if (src->mapped) {
      pool.blocks.erase(src);
    } else {
      pool.unmapped.erase(src);
    }
    if (dst->prev == src) dst->addr = src->addr;
    dst->size += src->size;
    unlink(src);
    delete_blk(src);
  }

  // ---------------------------------------------------------------- stats

  void add_reserved(uint64_t bytes) {
    stats.reserved_bytes += bytes;
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
  }
  bool fits_capacity(uint64_t bytes) const {
    return bytes <= opt.capacity_bytes && stats.reserved_bytes <= opt.capacity_bytes - bytes;
  }

  // ---------------------------------------------------------------- virtual addresses

  uintptr_t take_va(uint64_t bytes, uint64_t align) {
    uintptr_t base = round_up(next_va, align);
    next_va = base + bytes;
    return base;
  }

  Segment* add_segment(uintptr_t base, uint64_t size, StreamId stream, Pool& pool) {
    auto seg = std::make_unique<Segment>();
    seg->base = base;
    seg->size = size;
    seg->stream = stream;
    seg->pool = &pool;
    Segment* raw = seg.get();
    auto [it, inserted] = segments.emplace(base, std::move(seg));
    FULLSHARD_CHECK(inserted, "two segments at one address: SegmentSource::map reused a mapping");
    ++stats.num_segments;
    return raw;
  }
  void remove_segment(Segment* seg) {
    if (seg->source_reserved) source->release(seg->base, seg->size);
    segments.erase(seg->base);
    --stats.num_segments;
  }

  // ---------------------------------------------------------------- best fit

  uint64_t expandable_size(const Blk* b) const {
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
  }

  // get_free_block
  Blk* get_free_block(Pool& pool, StreamId stream, uint64_t size) {
    Blk key;
    key.stream = stream;
    key.size = size;
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    if (opt.expandable_segments) {
      for (auto next = std::next(it); next != pool.blocks.end() && (*next)->stream == stream &&
                                      expandable_size(*next) < expandable_size(*it);
           ++next) {
        it = next;
      }
    }
    const uint64_t max_split = opt.max_split_size_bytes;
    if (size < max_split && (*it)->size >= max_split) return nullptr;
    if (size >= max_split && (*it)->size >= size + kLargeBuffer) return nullptr;
    Blk* b = *it;
    pool.blocks.erase(it);
    return b;
  }

  bool should_split(const Blk* b, uint64_t size) const {
    const uint64_t remaining = b->size - size;
    if (b->seg->pool->small || opt.expandable_segments) return remaining >= kMinBlockSize;
    return size < opt.max_split_size_bytes && remaining > kSmallSize;
  }

  // ---------------------------------------------------------------- classic segments

  // alloc_block without expandable segments: one cudaMalloc of get_allocation_size bytes.
  Blk* alloc_segment(Pool& pool, StreamId stream, uint64_t size) {
    const uint64_t bytes = allocation_size(size);
    if (!fits_capacity(bytes)) return nullptr;
    uintptr_t base = 0;
    if (source != nullptr) {
      auto mapped = source->map(bytes);
      if (!mapped) return nullptr;
      base = *mapped;
    } else {
      base = take_va(bytes, kRoundLarge);
    }
    Segment* seg = add_segment(base, bytes, stream, pool);
    Blk* b = new_blk();
    b->addr = base;
    b->size = bytes;
    b->stream = stream;
    b->seg = seg;
    seg->head = b;
    add_reserved(bytes);
    return b;
  }

  // release_block: cudaFree of an unsplit cached segment.
  void release_block(Blk* b) {
    FULLSHARD_CHECK(!b->is_split() && !b->allocated && !b->seg->expandable,
                    "release_block of a block that is not a whole free segment");
    Segment* seg = b->seg;
    seg->pool->blocks.erase(b);
    if (source != nullptr) source->unmap(seg->base, seg->size);
    stats.reserved_bytes -= seg->size;
    remove_segment(seg);
    delete_blk(b);
  }

  // release_available_cached_blocks
  bool release_available_cached_blocks(Pool& pool, StreamId stream, uint64_t size) {
    const uint64_t max_split = opt.max_split_size_bytes;
    if (max_split == kNoMaxSplit || opt.expandable_segments) return false;
    Blk key;
    key.stream = stream;
    key.size = std::max(size, max_split);
    auto it = pool.blocks.lower_bound(&key);
    if (it != pool.blocks.end() && (*it)->stream == stream) {
      release_block(*it);
      return true;
    }
    // No single block is big enough: free oversize blocks, largest first.
    if (it == pool.blocks.begin()) return false;
    uint64_t released = 0;
    --it;
    while (released < key.size && (*it)->size >= max_split && (*it)->stream == stream) {
      Blk* cur = *it;
      released += cur->size;
      const bool last = it == pool.blocks.begin();
      if (!last) --it;
      release_block(cur);
      if (last) break;
    }
    return released >= key.size;
  }

  // ---------------------------------------------------------------- expandable segments

  uint64_t page_size(const Pool& pool) const { return pool.small ? kSmallBuffer : kLargeBuffer; }

  uint64_t address_space_size(uint64_t page) const {
    const uint64_t device = std::min(opt.capacity_bytes, kUnlimitedDeviceBytes);
    return round_up(device + device / 8, page);
  }

  // find_expandable_block: lowest-address run of free + unmapped blocks of the stream with room
  // for size bytes, starting at an unmapped block or the free block right before one. Reserves
  // a new segment when there is none. nullptr: the request is bigger than a whole segment.
  Blk* find_expandable_block(Pool& pool, StreamId stream, uint64_t size) {
    auto usable = [](const Blk* b) { return b != nullptr && !b->allocated; };
    auto has_room = [&](const Blk* b) {
      uint64_t bytes = 0;
      while (bytes < size && usable(b)) {
        bytes += b->size;
        b = b->next;
      }
      return bytes >= size;
    };
    Blk key;
    key.stream = stream;
    for (auto it = pool.unmapped.lower_bound(&key);
         it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
      Blk* c = *it;
      if (usable(c->prev)) c = c->prev;
      if (has_room(c)) return c;
    }
    const uint64_t page = page_size(pool);
    const uint64_t va = address_space_size(page);
    if (size > va) return nullptr;
    // NOTE [Expandable segments with real memory]: a source that can reserve address space
    // gives the segment real, contiguous addresses (pages are committed in place); otherwise
    // the segment lives at virtual addresses.
    std::optional<uintptr_t> reserved = source != nullptr ? source->reserve(va) : std::nullopt;
    Segment* seg = add_segment(reserved ? *reserved : take_va(va, page), va, stream, pool);
    seg->source_reserved = reserved.has_value();
    seg->expandable = true;
    seg->page = page;
    Blk* b = new_blk();
    b->addr = seg->base;
    b->size = va;
    b->stream = stream;
    b->mapped = false;
    b->seg = seg;
    seg->head = b;
    pool.unmapped.insert(b);
    return b;
  }

  // ExpandableSegment::map for pages [first, last): all or nothing.
  bool map_pages(Segment* seg, uint64_t first, uint64_t last) {
    const uint64_t bytes = (last - first) * seg->page;
    if (!fits_capacity(bytes)) return false;
    if (seg->source_reserved) {
      for (uint64_t p = first; p < last; ++p) {
        const uintptr_t addr = seg->base + p * seg->page;
        if (!source->commit(addr, seg->page)) {
          for (uint64_t q = first; q < p; ++q) {
            source->decommit(seg->source_pages.at(q), seg->page);
            seg->source_pages.erase(q);
          }
          return false;
        }
        seg->source_pages.emplace(p, addr);
      }
    } else if (source != nullptr) {
      for (uint64_t p = first; p < last; ++p) {
        auto addr = source->map(seg->page);
        if (!addr) {
          for (uint64_t q = first; q < p; ++q) {
            source->unmap(seg->source_pages.at(q), seg->page);
            seg->source_pages.erase(q);
          }
          return false;
        }
        seg->source_pages.emplace(p, *addr);
      }
    }
    add_reserved(bytes);
    return true;
  }

  void unmap_pages(Segment* seg, uint64_t first, uint64_t last) {
    if (source != nullptr) {
      for (uint64_t p = first; p < last; ++p) {
        if (seg->source_reserved) {
          source->decommit(seg->source_pages.at(p), seg->page);
        } else {
          source->unmap(seg->source_pages.at(p), seg->page);
        }
        seg->source_pages.erase(p);
      }
    }
    stats.reserved_bytes -= (last - first) * seg->page;
  }

  // map_block: maps the pages covering the first `size` bytes of unmapped block b; the mapped
  // part merges with free neighbours and joins the free pool.
  bool map_block(Blk* b, uint64_t size) {
    FULLSHARD_CHECK(!b->mapped && size > 0 && size <= b->size, "map_block of a bad block");
    Segment* seg = b->seg;
    const uint64_t first = (b->addr - seg->base) / seg->page;
    const uint64_t last = (b->addr + size - seg->base + seg->page - 1) / seg->page;
    if (!map_pages(seg, first, last)) return false;
    const uint64_t bytes = (last - first) * seg->page;
    Pool& pool = *seg->pool;
    pool.unmapped.erase(b);
    b->mapped = true;
    if (bytes < b->size) {
      Blk* rest = new_blk();
      rest->addr = b->addr + bytes;
      rest->size = b->size - bytes;
      rest->stream = b->stream;
      rest->mapped = false;
      rest->seg = seg;
      link_after(b, rest);
      pool.unmapped.insert(rest);
      b->size = bytes;
    }
    try_merge(b, b->prev);
    try_merge(b, b->next);
    pool.blocks.insert(b);
    return true;
  }

  // try_allocate_expandable_block
  Blk* alloc_expandable(Pool& pool, StreamId stream, uint64_t size) {
    Blk* c = find_expandable_block(pool, stream, size);
    if (c == nullptr) return nullptr;
    if (!c->mapped && !map_block(c, std::min(c->size, size))) return nullptr;
    while (c->size < size) {
      Blk* next = c->next;  // unmapped: c is free and merged with any free neighbour
      if (!map_block(next, std::min(size - c->size, next->size))) return nullptr;
      c = next;  // next absorbed c
    }
    pool.blocks.erase(c);
    return c;
  }

  // unmap_block: unmaps the whole pages inside free block b; partial pages at either end stay
  // mapped as free blocks.
  void unmap_block(Blk* b) {
    Segment* seg = b->seg;
    const uint64_t first = (b->addr - seg->base + seg->page - 1) / seg->page;
    const uint64_t last = (b->addr + b->size - seg->base) / seg->page;
    if (first >= last) return;
    Pool& pool = *seg->pool;
    pool.blocks.erase(b);
    const uintptr_t start = seg->base + first * seg->page;
    const uint64_t bytes = (last - first) * seg->page;
    const uint64_t before = start - b->addr;
    const uint64_t after = b->size - before - bytes;
    if (before > 0) {
      Blk* n = new_blk();
      n->addr = b->addr;
      n->size = before;
      n->stream = b->stream;
      n->seg = seg;
      link_before(b, n);
      pool.blocks.insert(n);
    }
    if (after > 0) {
      Blk* n = new_blk();
      n->addr = start + bytes;
      n->size = after;
      n->stream = b->stream;
      n->seg = seg;
      link_after(b, n);
      pool.blocks.insert(n);
    }
    b->addr = start;
    b->size = bytes;
    b->mapped = false;
    unmap_pages(seg, first, last);
    try_merge(b, b->prev);
    try_merge(b, b->next);
    pool.unmapped.insert(b);
  }

  // release_blocks + release_expandable_segment
  void release_blocks(Pool& pool) {
    std::vector<Blk*> to_unmap;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Blk* b = *it++;
      if (b->seg->expandable) {
        to_unmap.push_back(b);
      } else if (!b->is_split()) {
        release_block(b);
      }
    }
    for (Blk* b : to_unmap) {
      unmap_block(b);
      if (!b->is_split() && !b->mapped) {
        pool.unmapped.erase(b);
        remove_segment(b->seg);
        delete_blk(b);
      }
    }
  }

  // release_cached_blocks
  void release_cached_blocks() {
    release_blocks(large_pool);
    release_blocks(small_pool);
  }

  Blk* alloc_block(Pool& pool, StreamId stream, uint64_t size, bool is_retry) {
    if (is_retry) ++stats.num_alloc_retries;
    if (opt.expandable_segments) return alloc_expandable(pool, stream, size);
    return alloc_segment(pool, stream, size);
  }

  // ---------------------------------------------------------------- malloc / free

  std::optional<Block> malloc(uint64_t bytes, StreamId stream) {
    if (bytes == 0) {
      Block out;
      out.id = next_id++;
      out.stream = stream;
      return out;
    }
    if (bytes >= kMaxRequest) {
      ++stats.num_ooms;
      return std::nullopt;
    }
    const uint64_t size = round_size(bytes);
    Pool& pool = size <= kSmallSize ? small_pool : large_pool;
    Blk* b = get_free_block(pool, stream, size);
    if (b == nullptr) {
      b = alloc_block(pool, stream, size, false);
      if (b == nullptr && release_available_cached_blocks(pool, stream, size)) {
        b = alloc_block(pool, stream, size, false);
      }
      if (b == nullptr) {
        release_cached_blocks();
        b = alloc_block(pool, stream, size, true);
      }
      if (b == nullptr) {
        ++stats.num_ooms;
        return std::nullopt;
      }
    }
    // alloc_found_block: the front `size` bytes become the allocation.
    if (should_split(b, size)) {
      Blk* rest = b;
      b = new_blk();
      b->addr = rest->addr;
      b->size = size;
      b->stream = stream;
      b->seg = rest->seg;
      link_before(rest, b);
      rest->addr += size;
      rest->size -= size;
      pool.blocks.insert(rest);
    }
    b->allocated = true;
    b->requested = bytes;
    b->id = next_id++;
    live.emplace(b->id, b);
    stats.allocated_bytes += b->size;
    stats.requested_bytes += bytes;
    stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, stats.allocated_bytes);

    Block out;
    out.id = b->id;
    out.requested_bytes = bytes;
    out.size = b->size;
    out.address = b->addr;
    out.stream = stream;
    return out;
  }

  void free(const Block& block) {
    if (block.size == 0) return;  // a 0-byte allocation owns nothing
    auto it = live.find(block.id);
    FULLSHARD_CHECK(it != live.end(), "free of a block that is not live (double free?)");
    Blk* b = it->second;
    FULLSHARD_CHECK(b->addr == block.address && b->stream == block.stream && b->size == block.size,
                    "free of a Block that does not match the allocation with its id");
    live.erase(it);
    stats.allocated_bytes -= b->size;
    stats.requested_bytes -= b->requested;
    b->allocated = false;
    b->requested = 0;
    b->id = 0;
    // free_block
    try_merge(b, b->prev);
    try_merge(b, b->next);
    pool_of(b).blocks.insert(b);
  }

  // ---------------------------------------------------------------- inspection

  std::vector<SegmentInfo> snapshot() const {
    std::vector<SegmentInfo> out;
    for (const auto& [base, seg] : segments) {
      SegmentInfo* cur = nullptr;
      for (const Blk* b = seg->head; b != nullptr; b = b->next) {
        if (!b->mapped) {
          cur = nullptr;
          continue;
        }
        if (cur == nullptr) {
          out.emplace_back();
          cur = &out.back();
          cur->address = b->addr;
          cur->stream = seg->stream;
          cur->is_small = seg->pool->small;
          cur->is_expandable = seg->expandable;
        }
        cur->size += b->size;
        if (b->allocated) cur->allocated_bytes += b->size;
      }
    }
    return out;
  }

  void check_invariants() const {
    uint64_t allocated = 0, requested = 0, reserved = 0, live_count = 0;
    size_t free_count[2] = {0, 0}, unmapped_count[2] = {0, 0};
    for (const auto& [base, seg] : segments) {
      FULLSHARD_CHECK(
          seg->head != nullptr && seg->head->prev == nullptr && seg->head->addr == seg->base,
          "segment head is not at the segment base");
      uintptr_t end = seg->base;
      const Blk* prev = nullptr;
      for (const Blk* b = seg->head; b != nullptr; prev = b, b = b->next) {
        FULLSHARD_CHECK(b->seg == seg.get() && b->prev == prev && b->addr == end && b->size > 0,
                        "blocks do not tile their segment");
        FULLSHARD_CHECK(b->stream == seg->stream, "block stream differs from its segment's");
        end += b->size;
        const Pool& pool = *seg->pool;
        const int k = pool.small ? 1 : 0;
        if (!b->mapped) {
          FULLSHARD_CHECK(seg->expandable && !b->allocated, "unmapped block outside expandable");
          FULLSHARD_CHECK((b->addr - seg->base) % seg->page == 0 && b->size % seg->page == 0,
                          "unmapped block not page aligned");
          FULLSHARD_CHECK(prev == nullptr || prev->mapped, "adjacent unmapped blocks");
          FULLSHARD_CHECK(pool.unmapped.count(const_cast<Blk*>(b)) == 1,
                          "unmapped block missing from its pool");
          ++unmapped_count[k];
          continue;
        }
        reserved += b->size;
        if (b->allocated) {
          auto it = live.find(b->id);
          FULLSHARD_CHECK(it != live.end() && it->second == b, "allocated block not live");
          FULLSHARD_CHECK(b->size >= round_size(b->requested), "block smaller than its request");
          allocated += b->size;
          requested += b->requested;
          ++live_count;
        } else {
          FULLSHARD_CHECK(prev == nullptr || !prev->mapped || prev->allocated,
                          "adjacent free blocks were not merged");
          FULLSHARD_CHECK(pool.blocks.count(const_cast<Blk*>(b)) == 1,
                          "free block missing from its pool");
          ++free_count[k];
        }
      }
      FULLSHARD_CHECK(end == seg->base + seg->size, "blocks do not cover their segment");
      if (seg->expandable && source != nullptr) {
        uint64_t mapped = 0;
        for (const Blk* b = seg->head; b != nullptr; b = b->next) mapped += b->mapped ? b->size : 0;
        FULLSHARD_CHECK(seg->source_pages.size() * seg->page == mapped,
                        "source pages disagree with mapped blocks");
      }
    }
    FULLSHARD_CHECK(large_pool.blocks.size() == free_count[0] &&
                        small_pool.blocks.size() == free_count[1] &&
                        large_pool.unmapped.size() == unmapped_count[0] &&
                        small_pool.unmapped.size() == unmapped_count[1],
                    "pool sets hold blocks that are not in any segment");
    FULLSHARD_CHECK(live_count == live.size(), "live map holds blocks not in any segment");
    FULLSHARD_CHECK(allocated == stats.allocated_bytes, "allocated_bytes disagrees with blocks");
    FULLSHARD_CHECK(requested == stats.requested_bytes, "requested_bytes disagrees with blocks");
    FULLSHARD_CHECK(reserved == stats.reserved_bytes, "reserved_bytes disagrees with segments");
    FULLSHARD_CHECK(segments.size() == stats.num_segments, "num_segments disagrees");
    FULLSHARD_CHECK(stats.peak_allocated_bytes >= stats.allocated_bytes &&
                        stats.peak_reserved_bytes >= stats.reserved_bytes,
                    "peak below current");
  }
};

CachingAllocator::CachingAllocator(AllocatorOptions options, SegmentSource* source)
    : impl_(std::make_unique<Impl>(options, source)) {}

CachingAllocator::~CachingAllocator() = default;

std::optional<Block> CachingAllocator::malloc(uint64_t bytes, StreamId stream) {
  return impl_->malloc(bytes, stream);
}

void CachingAllocator::free(const Block& block) { impl_->free(block); }

void CachingAllocator::empty_cache() { impl_->release_cached_blocks(); }

void CachingAllocator::reset_peak_stats() {
  impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
  impl_->stats.peak_reserved_bytes = impl_->stats.reserved_bytes;
}

const AllocatorStats& CachingAllocator::stats() const { return impl_->stats; }

const AllocatorOptions& CachingAllocator::options() const { return impl_->opt; }

std::vector<SegmentInfo> CachingAllocator::snapshot() const { return impl_->snapshot(); }

void CachingAllocator::check_invariants() const { impl_->check_invariants(); }

}  // namespace fullshard
