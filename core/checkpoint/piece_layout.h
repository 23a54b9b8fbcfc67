#pragma once
// Which box of a global tensor each rank holds under FSDP's dim-0 sharding of a tensor that
// tensor parallelism may already have split (docs/checkpoints.md), and the placements DTensor
// gives it. Pure functions: the saving ranks, the metadata writer and a loading rank of any
// other mesh all compute the same boxes.
//
// NOTE [Strided pieces of tensor-parallel weights]: FSDP2 shards the tp-local tensor along
// dim 0 (FSDPParam._init_sharded_param). For a ColwiseParallel weight (tp Shard(0)) both
// shardings cut dim 0: tp rank t holds global rows [t*L, (t+1)*L) (L = rows / tp), and FSDP
// rank s holds local rows [shard_row_offset(L, S, s), + shard_rows(L, S, s)) of those. So a
// rank's piece is global rows t*L + that range: over the FSDP dim the pieces are strided
// (every tp block contributes one piece per FSDP rank), which FSDP2 writes as the placement
// _StridedShard(dim=0, split_factor=tp) so that a full state dict is reassembled in the right
// order rather than as Shard(0) over the flattened mesh. For a RowwiseParallel weight (tp
// Shard(1)) the piece is the FSDP rows of the column block [t*C, (t+1)*C) (C = cols / tp);
// for a replicated weight (norms) it is the FSDP rows, the same on every tp rank, and only tp
// rank 0 stores it (as with HSDP's replicas, only replicate rank 0 writes).
//
// NOTE [Multi-box pieces of fused weights]: GPT-2's fused c_attn weight [3D, D] (and bias
// [3D]) is split over tp per q, k, v block (Param::tp_blocks = 3, NOTE [Fused qkv under tensor
// parallelism]): tp rank t's local tensor stacks rows [t*D/T, (t+1)*D/T) of each D-row block,
// and FSDP then takes a contiguous run of those local rows. A run that crosses a block
// boundary is not one box of the global tensor: it is one box per block it touches (at most
// tp_blocks, and at most tp_blocks + 1 for any contiguous run), each whole rows. piece_boxes
// gives them in local row order, which is also increasing global row order (local row j of
// block b is global row b*(R/B) + t*(R/(B*T)) + j % (R/(B*T)), monotone in j). The rank file
// keeps the piece as ONE safetensors entry (the rank's unpadded local shard, these boxes
// stacked on dim 0), and metadata.json lists one chunk per box: the chunks of a tensor in one
// file are stored back to back in the order metadata.json lists them (CheckpointReader), so
// a checkpoint with one chunk per tensor and file, every earlier one, reads as before.
#include <string>
#include <vector>

#include "core/checkpoint/reshard.h"

namespace fullshard {

struct PieceLayout {
  int tp_dim = -1;      // -1: Replicate over tp; 0: Shard(0); 1: Shard(1)
  int tp_degree = 1;    // size of the tp mesh dim
  int shard_world = 1;  // size of FSDP's shard dim (dim-0 sharding of the tp-local tensor)
  int replicate = 1;    // size of HSDP's replicate dim (placements only)
  int tp_blocks =
      1;  // tp_dim 0: stacked blocks each split over tp (NOTE [Multi-box pieces of fused weights])
};

// Whether a piece of this layout may be several boxes (a blocked Shard(0) over tp > 1).
inline bool multi_box(const PieceLayout& l) {
  return l.tp_dim == 0 && l.tp_blocks > 1 && l.tp_degree > 1;
}

// The unpadded piece tp rank `tp_index`, FSDP shard rank `shard_rank` holds, as a box of the
// global tensor of shape `global`. Not for a multi_box layout (use piece_boxes).
ChunkBox piece_box(const Shape& global, const PieceLayout& l, int tp_index, int shard_rank);

// The same piece as boxes of whole-row runs in local row order (NOTE [Multi-box pieces of
// fused weights]): one box, except under a multi_box layout, where it is one per block the
// piece touches (an empty piece: one empty box). The rank's unpadded local shard is their
// row-major contents stacked on dim 0.
std::vector<ChunkBox> piece_boxes(const Shape& global, const PieceLayout& l, int tp_index,
                                  int shard_rank);

// The writer index of (shard_rank, tp_index): its rank file is shard_file_name(index, files).
inline int piece_file_index(const PieceLayout& l, int tp_index, int shard_rank) {
  return shard_rank * l.tp_degree + tp_index;
}
inline int piece_files(const PieceLayout& l) { return l.shard_world * l.tp_degree; }

// Whether tp rank `tp_index` stores its piece (a tensor replicated over tp: rank 0 only).
inline bool stores_piece(const PieceLayout& l, int tp_index) {
  return l.tp_dim >= 0 || tp_index == 0;
}

struct StoredPiece {
  int file_index = 0;
  ChunkBox box;
};
// Every box a save stores (piece_boxes of every stored piece), sorted by the box's offsets
// (they tile the tensor); a file's boxes of one tensor stay in local row order.
std::vector<StoredPiece> stored_pieces(const Shape& global, const PieceLayout& l);

// DTensor's placements over the mesh (replicate if > 1, shard, tp if > 1), e.g.
// ["_StridedShard(dim=0, sf=2)", "Shard(0)"] for a ColwiseParallel weight under FSDP x tp 2.
std::vector<std::string> dtensor_placements(const PieceLayout& l);

}  // namespace fullshard
