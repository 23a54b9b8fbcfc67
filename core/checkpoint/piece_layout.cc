#include "core/checkpoint/piece_layout.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"

namespace fullshard {

ChunkBox piece_box(const Shape& global, const PieceLayout& l, int tp_index, int shard_rank) {
  FULLSHARD_CHECK(!global.empty() && l.tp_degree >= 1 && l.shard_world >= 1 && tp_index >= 0 && tp_index < l.tp_degree &&
                      shard_rank >= 0 && shard_rank < l.shard_world,
                  "piece_box: bad layout");
  Shape local = global;
  if (l.tp_dim >= 0) {
    FULLSHARD_CHECK(static_cast<size_t>(l.tp_dim) < global.size() && global[l.tp_dim] % l.tp_degree == 0,
                    "piece_box: tp dim does not split evenly");
    local[l.tp_dim] /= l.tp_degree;
  }
  // NOTE [Strided pieces of tensor-parallel weights]
  ChunkBox b = rows_box(local, shard_row_offset(local[0], l.shard_world, shard_rank),
                        shard_rows(local[0], l.shard_world, shard_rank));
  if (l.tp_dim >= 0) b.offsets[l.tp_dim] += tp_index * local[l.tp_dim];
  return b;
}

std::vector<StoredPiece> stored_pieces(const Shape& global, const PieceLayout& l) {
  std::vector<StoredPiece> out;
  for (int s = 0; s < l.shard_world; ++s)
    for (int t = 0; t < l.tp_degree; ++t)
      if (stores_piece(l, t)) out.push_back({piece_file_index(l, t, s), piece_box(global, l, t, s)});
  std::stable_sort(out.begin(), out.end(),
                   [](const StoredPiece& a, const StoredPiece& b) { return a.box.offsets < b.box.offsets; });
  return out;
}

std::vector<std::string> dtensor_placements(const PieceLayout& l) {
  std::vector<std::string> p;
  if (l.replicate > 1) p.push_back("Replicate()");
  const bool strided = l.tp_degree > 1 && l.tp_dim == 0;
  p.push_back(strided ? "_StridedShard(dim=0, sf=" + std::to_string(l.tp_degree) + ")" : "Shard(0)");
  if (l.tp_degree > 1) p.push_back(l.tp_dim < 0 ? "Replicate()" : "Shard(" + std::to_string(l.tp_dim) + ")");
  return p;
}

}  // namespace fullshard
