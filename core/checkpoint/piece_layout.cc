#include "core/checkpoint/piece_layout.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"

namespace fullshard {
namespace {

// NOTE [Pieces of expert-parallel weights] (piece_layout.h).
ChunkBox expert_box(const Shape& global, const PieceLayout& l, int shard_rank) {
  const int ep = l.ep_degree, efsdp = l.shard_world / std::max(ep, 1);
  FULLSHARD_CHECK(ep >= 1 && l.shard_world % ep == 0 && l.tp_dim < 0 && l.tp_degree == 1 &&
                      (l.shard_dim == 0 || l.shard_dim == 1) &&
                      static_cast<size_t>(l.shard_dim) < global.size() && global[0] % ep == 0,
                  "piece_box: bad expert layout");
  Shape local = global;
  local[0] /= ep;
  const int e = shard_rank % ep, f = shard_rank / ep;
  ChunkBox b;
  if (l.shard_dim == 0) {
    b = rows_box(local, shard_row_offset(local[0], efsdp, f), shard_rows(local[0], efsdp, f));
  } else {
    FULLSHARD_CHECK(local[1] % efsdp == 0, "piece_box: Shard(1) needs an even split of dim 1");
    b = full_box(local);
    b.lengths[1] = local[1] / efsdp;
    b.offsets[1] = f * b.lengths[1];
  }
  b.offsets[0] += e * local[0];
  return b;
}

}  // namespace

ChunkBox piece_box(const Shape& global, const PieceLayout& l, int tp_index, int shard_rank) {
  FULLSHARD_CHECK(!global.empty() && l.tp_degree >= 1 && l.shard_world >= 1 && tp_index >= 0 &&
                      tp_index < l.tp_degree && shard_rank >= 0 && shard_rank < l.shard_world,
                  "piece_box: bad layout");
  FULLSHARD_CHECK(!multi_box(l), "piece_box: a blocked tp layout is several boxes (piece_boxes)");
  if (l.ep_degree > 1 || l.shard_dim != 0) return expert_box(global, l, shard_rank);
  Shape local = global;
  if (l.tp_dim >= 0) {
    FULLSHARD_CHECK(
        static_cast<size_t>(l.tp_dim) < global.size() && global[l.tp_dim] % l.tp_degree == 0,
        "piece_box: tp dim does not split evenly");
    local[l.tp_dim] /= l.tp_degree;
  }
  // NOTE [Strided pieces of tensor-parallel weights] (piece_layout.h).
  ChunkBox b = rows_box(local, shard_row_offset(local[0], l.shard_world, shard_rank),
                        shard_rows(local[0], l.shard_world, shard_rank));
  if (l.tp_dim >= 0) b.offsets[l.tp_dim] += tp_index * local[l.tp_dim];
  return b;
}

std::vector<ChunkBox> piece_boxes(const Shape& global, const PieceLayout& l, int tp_index,
                                  int shard_rank) {
  if (!multi_box(l)) return {piece_box(global, l, tp_index, shard_rank)};
  FULLSHARD_CHECK(!global.empty() && tp_index >= 0 && tp_index < l.tp_degree && shard_rank >= 0 &&
                      shard_rank < l.shard_world,
                  "piece_boxes: bad layout");
  const int64_t T = l.tp_degree, B = l.tp_blocks;
  FULLSHARD_CHECK(global[0] % (T * B) == 0, "piece_boxes: rows do not split into blocks over tp");
  // NOTE [Multi-box pieces of fused weights] (piece_layout.h).
  const int64_t local_rows = global[0] / T, block = local_rows / B, global_block = global[0] / B;
  const int64_t first = shard_row_offset(local_rows, l.shard_world, shard_rank);
  const int64_t end = first + shard_rows(local_rows, l.shard_world, shard_rank);
  if (first >= end)
    return {rows_box(global, std::min(first / block, B - 1) * global_block + tp_index * block, 0)};
  std::vector<ChunkBox> out;
  for (int64_t b = first / block; b < B && b * block < end; ++b) {
    const int64_t lo = std::max(first, b * block), hi = std::min(end, (b + 1) * block);
    out.push_back(
        rows_box(global, b * global_block + tp_index * block + (lo - b * block), hi - lo));
  }
  return out;
}

std::vector<StoredPiece> stored_pieces(const Shape& global, const PieceLayout& l) {
  std::vector<StoredPiece> out;
  for (int s = 0; s < l.shard_world; ++s)
    for (int t = 0; t < l.tp_degree; ++t)
      if (stores_piece(l, t))
        for (const ChunkBox& b : piece_boxes(global, l, t, s))
          out.push_back({piece_file_index(l, t, s), b});
  std::stable_sort(out.begin(), out.end(), [](const StoredPiece& a, const StoredPiece& b) {
    return a.box.offsets < b.box.offsets;
  });
  return out;
}

std::vector<std::string> dtensor_placements(const PieceLayout& l) {
  std::vector<std::string> p;
  if (l.replicate > 1) p.push_back("Replicate()");
  if (l.ep_degree > 1) {  // over (efsdp, ep): NOTE [Pieces of expert-parallel weights]
    p.push_back(l.shard_dim == 1 ? "Shard(1)"
                                 : "_StridedShard(dim=0, sf=" + std::to_string(l.ep_degree) + ")");
    p.push_back("Shard(0)");
    return p;
  }
  if (l.shard_dim == 1) {
    p.push_back("Shard(1)");
    return p;
  }
  const bool strided = l.tp_degree > 1 && l.tp_dim == 0;
  p.push_back(strided ? "_StridedShard(dim=0, sf=" + std::to_string(l.tp_degree) + ")"
                      : "Shard(0)");
  if (l.tp_degree > 1)
    p.push_back(l.tp_dim < 0 ? "Replicate()" : "Shard(" + std::to_string(l.tp_dim) + ")");
  return p;
}

std::vector<std::string> replicated_placements(const PieceLayout& l) {
  const size_t dims = 1 + (l.replicate > 1 ? 1 : 0) + (l.tp_degree > 1 ? 1 : 0);
  return std::vector<std::string>(dims, "Replicate()");
}

}  // namespace fullshard
