#include "core/checkpoint/reshard.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"

namespace fullshard {

std::vector<SavedChunk> chunks_of_sharding(const Shape& shape, int world) {
  FULLSHARD_CHECK(world >= 1 && !shape.empty(), "chunks_of_sharding: world < 1 or a 0-d tensor");
  std::vector<SavedChunk> out;
  for (int r = 0; r < world; ++r)
    out.push_back({shard_row_offset(shape[0], world, r), shard_rows(shape[0], world, r)});
  return out;
}

std::vector<ChunkRead> reads_for_shard(const Shape& shape, uint64_t elem_size,
                                       const std::vector<SavedChunk>& chunks, int world, int rank) {
  FULLSHARD_CHECK(world >= 1 && rank >= 0 && rank < world && !shape.empty(),
                  "reads_for_shard: bad rank or 0-d");
  const int64_t want_begin = shard_row_offset(shape[0], world, rank);
  const int64_t want_end = want_begin + shard_rows(shape[0], world, rank);
  const uint64_t row_bytes = static_cast<uint64_t>(row_numel(shape)) * elem_size;
  std::vector<ChunkRead> out;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t b = std::max(want_begin, chunks[i].row_begin);
    const int64_t e = std::min(want_end, chunks[i].row_begin + chunks[i].rows);
    if (b >= e) continue;
    out.push_back({i, static_cast<uint64_t>(b - chunks[i].row_begin) * row_bytes,
                   static_cast<uint64_t>(e - b) * row_bytes,
                   static_cast<uint64_t>(b - want_begin) * row_bytes});
  }
  std::sort(out.begin(), out.end(),
            [](const ChunkRead& a, const ChunkRead& b) { return a.dst_offset < b.dst_offset; });
  return out;
}

void validate_chunks(const Shape& shape, const std::vector<SavedChunk>& chunks,
                     const std::string& where) {
  if (shape.empty())
    throw InputError(where, "is a 0-d tensor",
                     "FSDP shards dim 0: give every tensor at least one dim");
  const int64_t d0 = shape[0];
  int64_t pos = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    const std::string what = "chunk " + std::to_string(i) + " (rows " +
                             std::to_string(c.row_begin) + " + " + std::to_string(c.rows) + ")";
    if (c.rows < 0 || c.row_begin < 0)
      throw InputError(where, what + " is negative", "the metadata is damaged");
    if (c.row_begin != pos)
      throw InputError(
          where,
          what + (c.row_begin < pos ? " overlaps the previous chunk"
                                    : " leaves a gap after row " + std::to_string(pos)),
          "the metadata is damaged; save the checkpoint again");
    if (c.rows > d0 - pos)
      throw InputError(where, what + " ends past dim 0 of shape " + shape_str(shape),
                       "the metadata is damaged");
    pos += c.rows;
  }
  if (pos != d0)
    throw InputError(where,
                     "chunks cover rows [0, " + std::to_string(pos) + ") of " + std::to_string(d0),
                     "the checkpoint is missing pieces; save it again");
}

ChunkBox full_box(const Shape& shape) { return {Shape(shape.size(), 0), shape}; }

ChunkBox rows_box(const Shape& shape, int64_t row_begin, int64_t rows) {
  ChunkBox b = full_box(shape);
  b.offsets.at(0) = row_begin;
  b.lengths.at(0) = rows;
  return b;
}

int64_t box_numel(const ChunkBox& b) { return numel(b.lengths); }

std::string box_str(const ChunkBox& b) {
  std::string s = "[";
  for (size_t d = 0; d < b.offsets.size(); ++d)
    s += (d ? ", " : "") + std::to_string(b.offsets[d]) + ":" +
         std::to_string(b.offsets[d] + b.lengths[d]);
  return s + "]";
}

std::vector<ChunkRead> reads_for_box(const Shape& shape, uint64_t elem_size,
                                     const std::vector<ChunkBox>& chunks, const ChunkBox& want) {
  const size_t n = shape.size();
  FULLSHARD_CHECK(n > 0 && want.offsets.size() == n && want.lengths.size() == n,
                  "reads_for_box: rank mismatch");
  auto strides = [n](const Shape& lengths) {
    Shape st(n, 1);
    for (size_t d = n - 1; d > 0; --d) st[d - 1] = st[d] * lengths[d];
    return st;
  };
  const Shape dst_stride = strides(want.lengths);
  std::vector<ChunkRead> out;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkBox& c = chunks[i];
    FULLSHARD_CHECK(c.offsets.size() == n && c.lengths.size() == n,
                    "reads_for_box: chunk rank mismatch");
    Shape lo(n), len(n);
    bool empty = false;
    for (size_t d = 0; d < n; ++d) {
      lo[d] = std::max(want.offsets[d], c.offsets[d]);
      len[d] = std::min(want.offsets[d] + want.lengths[d], c.offsets[d] + c.lengths[d]) - lo[d];
      empty = empty || len[d] <= 0;
    }
    if (empty) continue;
    // Dims k.. form one contiguous run: every dim after k spans both boxes whole.
    size_t k = n - 1;
    while (k > 0 && len[k] == c.lengths[k] && len[k] == want.lengths[k]) --k;
    const Shape src_stride = strides(c.lengths);
    const uint64_t run = static_cast<uint64_t>(len[k] * src_stride[k]) * elem_size;
    Shape idx(k, 0);  // position within the intersection over dims < k
    for (;;) {
      int64_t src = 0, dst = 0;
      for (size_t d = 0; d < n; ++d) {
        const int64_t g = lo[d] + (d < k ? idx[d] : 0);
        src += (g - c.offsets[d]) * src_stride[d];
        dst += (g - want.offsets[d]) * dst_stride[d];
      }
      out.push_back(
          {i, static_cast<uint64_t>(src) * elem_size, run, static_cast<uint64_t>(dst) * elem_size});
      size_t d = k;
      while (d > 0 && ++idx[d - 1] == len[d - 1]) idx[--d] = 0;
      if (d == 0) break;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ChunkRead& a, const ChunkRead& b) { return a.dst_offset < b.dst_offset; });
  return out;
}

void validate_boxes(const Shape& shape, const std::vector<ChunkBox>& chunks,
                    const std::string& where) {
  if (shape.empty())
    throw InputError(where, "is a 0-d tensor",
                     "FSDP shards dim 0: give every tensor at least one dim");
  const size_t n = shape.size();
  bool rows_only = true;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    const std::string what = "chunk " + std::to_string(i);
    if (c.offsets.size() != n || c.lengths.size() != n)
      throw InputError(where,
                       what + " has " + std::to_string(c.offsets.size()) + " offsets and " +
                           std::to_string(c.lengths.size()) + " lengths for a " +
                           std::to_string(n) + "-d tensor",
                       "the metadata is damaged");
    for (size_t d = 0; d < n; ++d) {
      if (c.offsets[d] < 0 || c.lengths[d] < 0)
        throw InputError(where, what + " " + box_str(c) + " is negative",
                         "the metadata is damaged");
      if (c.lengths[d] > shape[d] - c.offsets[d])
        throw InputError(where,
                         what + " " + box_str(c) + " ends past dim " + std::to_string(d) +
                             " of shape " + shape_str(shape),
                         "the metadata is damaged");
      if (d > 0 && (c.offsets[d] != 0 || c.lengths[d] != shape[d])) rows_only = false;
    }
  }
  if (rows_only) {  // dim-0 pieces: validate_chunks on them sorted by row names gaps and overlaps
    std::vector<SavedChunk> rows;
    for (const auto& c : chunks)
      if (c.lengths[0] > 0)
        rows.push_back({c.offsets[0], c.lengths[0]});  // empty pieces: bounds checked above
    std::stable_sort(rows.begin(), rows.end(), [](const SavedChunk& a, const SavedChunk& b) {
      return a.row_begin != b.row_begin ? a.row_begin < b.row_begin : a.rows < b.rows;
    });
    validate_chunks(shape, rows, where);
    return;
  }
  // Sweep over dim 0: only boxes whose row ranges overlap can overlap.
  std::vector<size_t> order;
  int64_t covered = 0;
  for (size_t i = 0; i < chunks.size(); ++i)
    if (box_numel(chunks[i]) > 0) {
      order.push_back(i);
      covered += box_numel(chunks[i]);
    }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return chunks[a].offsets[0] < chunks[b].offsets[0]; });
  for (size_t x = 0; x < order.size(); ++x) {
    const ChunkBox& a = chunks[order[x]];
    for (size_t y = x + 1;
         y < order.size() && chunks[order[y]].offsets[0] < a.offsets[0] + a.lengths[0]; ++y) {
      const ChunkBox& b = chunks[order[y]];
      bool overlap = true;
      for (size_t d = 0; d < n; ++d)
        overlap = overlap && std::max(a.offsets[d], b.offsets[d]) <
                                 std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
      if (overlap)
        throw InputError(where,
                         "chunk " + std::to_string(order[x]) + " " + box_str(a) +
                             " overlaps chunk " + std::to_string(order[y]) + " " + box_str(b),
                         "the metadata is damaged; save the checkpoint again");
    }
  }
  if (covered != numel(shape))
    throw InputError(where,
                     "chunks cover " + std::to_string(covered) + " of " +
                         std::to_string(numel(shape)) + " elements",
                     "the checkpoint is missing pieces; save it again");
}

}  // namespace fullshard
