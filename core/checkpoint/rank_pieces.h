#pragma once
// The pieces one rank of a scenario holds (NOTE [Strided pieces of tensor-parallel weights]):
// its FSDP shard rank and tp rank, and for each parameter the layout and box of the global
// tensor. Saving, resuming and --init-from (runner/) all ask this one place.
#include "core/checkpoint/piece_layout.h"
#include "core/model/module.h"
#include "core/scenario/scenario.h"

namespace fullshard {

struct RankPieces {
  int shard_rank = 0;  // index in the FSDP shard group
  int tp_index = 0;    // index in the tp group
  PieceLayout mesh;    // tp_degree, shard_world, replicate; tp_dim -1

  // The layout of parameter `p` (and of its optimizer states).
  PieceLayout layout_of(const Param& p) const;
  // This rank's unpadded piece of `p`, as a box of its global tensor (not for a multi_box
  // layout: GPT-2's c_attn under tp).
  ChunkBox box_of(const Param& p) const {
    return piece_box(p.global_shape(), layout_of(p), tp_index, shard_rank);
  }
  // The same piece as boxes in local row order (NOTE [Multi-box pieces of fused weights]).
  std::vector<ChunkBox> boxes_of(const Param& p) const {
    return piece_boxes(p.global_shape(), layout_of(p), tp_index, shard_rank);
  }
  // Whether this rank's piece of `p` is stored (a tensor replicated over tp: by tp rank 0).
  bool stores(const Param& p) const { return stores_piece(layout_of(p), tp_index); }
  int file_index() const { return piece_file_index(mesh, tp_index, shard_rank); }
};

RankPieces rank_pieces(const Scenario& s, int rank);

}  // namespace fullshard
