#include "core/checkpoint/reshard.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"

namespace fullshard {

std::vector<SavedChunk> chunks_of_sharding(const Shape& shape, int world) {
  FULLSHARD_CHECK(world >= 1 && !shape.empty(), "chunks_of_sharding: world < 1 or a 0-d tensor");
  std::vector<SavedChunk> out;
  for (int r = 0; r < world; ++r) out.push_back({shard_row_offset(shape[0], world, r), shard_rows(shape[0], world, r)});
  return out;
}

std::vector<ChunkRead> reads_for_shard(const Shape& shape, uint64_t elem_size, const std::vector<SavedChunk>& chunks,
                                       int world, int rank) {
  FULLSHARD_CHECK(world >= 1 && rank >= 0 && rank < world && !shape.empty(), "reads_for_shard: bad rank or 0-d");
  const int64_t want_begin = shard_row_offset(shape[0], world, rank);
  const int64_t want_end = want_begin + shard_rows(shape[0], world, rank);
  const uint64_t row_bytes = static_cast<uint64_t>(row_numel(shape)) * elem_size;
  std::vector<ChunkRead> out;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t b = std::max(want_begin, chunks[i].row_begin);
    const int64_t e = std::min(want_end, chunks[i].row_begin + chunks[i].rows);
    if (b >= e) continue;
    out.push_back({i, static_cast<uint64_t>(b - chunks[i].row_begin) * row_bytes,
                   static_cast<uint64_t>(e - b) * row_bytes, static_cast<uint64_t>(b - want_begin) * row_bytes});
  }
  std::sort(out.begin(), out.end(), [](const ChunkRead& a, const ChunkRead& b) { return a.dst_offset < b.dst_offset; });
  return out;
}

void validate_chunks(const Shape& shape, const std::vector<SavedChunk>& chunks, const std::string& where) {
  if (shape.empty()) throw InputError(where, "is a 0-d tensor", "FSDP shards dim 0: give every tensor at least one dim");
  const int64_t d0 = shape[0];
  int64_t pos = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    const std::string what = "chunk " + std::to_string(i) + " (rows " + std::to_string(c.row_begin) + " + " +
                             std::to_string(c.rows) + ")";
    if (c.rows < 0 || c.row_begin < 0) throw InputError(where, what + " is negative", "the metadata is damaged");
    if (c.row_begin != pos)
      throw InputError(where, what + (c.row_begin < pos ? " overlaps the previous chunk" : " leaves a gap after row " + std::to_string(pos)),
                       "the metadata is damaged; save the checkpoint again");
    if (c.rows > d0 - pos)
      throw InputError(where, what + " ends past dim 0 of shape " + shape_str(shape), "the metadata is damaged");
    pos += c.rows;
  }
  if (pos != d0)
    throw InputError(where, "chunks cover rows [0, " + std::to_string(pos) + ") of " + std::to_string(d0),
                     "the checkpoint is missing pieces; save it again");
}

}  // namespace fullshard
