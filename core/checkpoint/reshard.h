#pragma once
// Pure slice arithmetic of a sharded checkpoint: which rows of a tensor each saved piece
// holds, and which byte ranges of which pieces a rank of a new mesh reads to build its shard.
//
// NOTE [Reshard on load]: a checkpoint stores each parameter (and each optimizer state) as
// the unpadded torch.chunk pieces of its dim-0 sharding (NOTE [torch.chunk layout]): piece r
// holds global rows [shard_row_offset(d0, W, r), + shard_rows(d0, W, r)). A rank of a new
// mesh with shard world W' needs rows [shard_row_offset(d0, W', r'), + shard_rows(...)); since
// rows are contiguous in row-major storage, every overlap of the wanted rows with a piece is
// one contiguous byte range on both sides. So a rank reads only what it holds afterwards,
// as DCP's load planner does, and never the whole tensor. The padding (FSDP2's zero rows at
// the tail of the last shards) is not stored: the loading rank zero-fills it.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/shape.h"

namespace fullshard {

// One stored piece of a tensor: global rows [row_begin, row_begin + rows) of dim 0.
struct SavedChunk {
  int64_t row_begin = 0;
  int64_t rows = 0;
};

// The pieces a dim-0 sharding over `world` ranks stores, one per shard rank (empty trailing
// chunks included, so piece i belongs to shard rank i).
std::vector<SavedChunk> chunks_of_sharding(const Shape& shape, int world);

// One read: bytes [src_offset, src_offset + bytes) of piece `chunk`'s data go to byte
// `dst_offset` of the reader's unpadded local shard.
struct ChunkRead {
  size_t chunk = 0;
  uint64_t src_offset = 0;
  uint64_t bytes = 0;
  uint64_t dst_offset = 0;
};

// The reads that build rank `rank`'s unpadded shard of `shape` (elements of `elem_size`
// bytes) under a dim-0 sharding over `world` ranks, from `chunks` (validated: see below).
// Reads are in destination order and cover the shard exactly once; a rank with an empty
// shard reads nothing.
std::vector<ChunkRead> reads_for_shard(const Shape& shape, uint64_t elem_size,
                                       const std::vector<SavedChunk>& chunks, int world, int rank);

// ---------------------------------------------------------------- pieces as boxes
// NOTE [Pieces as boxes]: with tensor parallelism a rank's piece is not a row range of the
// global tensor: a RowwiseParallel weight (Shard(1)) holds a column block of some rows. So the
// metadata describes every stored piece as DCP's ChunkStorageMetadata does, by its offsets
// and lengths per dim of the GLOBAL tensor, and a loading rank intersects the box it holds
// (under its own mesh and placements) with every stored box. An intersection is contiguous
// in both row-major storages over its trailing dims that span both boxes whole; reads are
// runs of that length, so a rank reads exactly the bytes it holds afterwards.

struct ChunkBox {
  Shape offsets;  // per dim, into the global tensor
  Shape lengths;  // per dim; the stored tensor's shape
  bool operator==(const ChunkBox& o) const { return offsets == o.offsets && lengths == o.lengths; }
};

ChunkBox full_box(const Shape& shape);
ChunkBox rows_box(const Shape& shape, int64_t row_begin,
                  int64_t rows);  // whole rows [begin, begin + rows)
int64_t box_numel(const ChunkBox& b);
std::string box_str(const ChunkBox& b);  // "[4:8, 0:16]"

// The reads that fill `want` (a box of `shape`; the destination is its row-major storage)
// from `chunks` (each a row-major stored box). Sorted by destination offset, covering `want`
// exactly once when `chunks` tile `shape` (validate_boxes); an empty `want` reads nothing.
std::vector<ChunkRead> reads_for_box(const Shape& shape, uint64_t elem_size,
                                     const std::vector<ChunkBox>& chunks, const ChunkBox& want);

// Checks that `chunks` tile `shape` exactly: every box inside the tensor, no two non-empty
// boxes overlap, their elements sum to the tensor's. Row ranges keep validate_chunks' messages.
// Throws InputError whose where is `where`.
void validate_boxes(const Shape& shape, const std::vector<ChunkBox>& chunks,
                    const std::string& where);

// Checks that `chunks` tile dim 0 of `shape` exactly (sorted by row_begin, no overlap, no
// gap, ending at d0; every piece non-negative). Throws InputError whose where is `where`
// (e.g. "metadata.json: tensor 'param/model.norm.weight'").
void validate_chunks(const Shape& shape, const std::vector<SavedChunk>& chunks,
                     const std::string& where);

}  // namespace fullshard
