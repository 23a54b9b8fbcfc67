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
//
// NOTE [Pieces of expert-parallel weights]: a routed expert weight [E, ...] is split over ep
// (ExpertParallel's Shard(0): ep index e holds experts [e*E/ep, (e+1)*E/ep)) and that local
// tensor is fully_shard-ed over the efsdp ranks (NOTE [Expert-parallel mesh]: shard rank i is
// ep index i % ep, efsdp index i / ep, efsdp = shard_world / ep), on dim 0 (torch.chunk rows of
// the E/ep experts) or, where efsdp exceeds E/ep, on dim 1 (every local expert's block
// [f*d1/efsdp, +d1/efsdp) of dim 1, no padding: NOTE [Shard(i) placement]). Either way a shard
// rank's piece is ONE box of the global tensor: the FSDP box of the local tensor moved by
// e*E/ep rows. The (e, f) pairs of one shard group are every pair once, so the pieces tile the
// tensor and, as for dense weights, only HSDP's replicate rank 0 stores them. DTensor writes
// the placements over (efsdp, ep) as for a ColwiseParallel weight: efsdp _StridedShard(dim=0,
// sf=ep) when both cut dim 0 (else Shard(1)), ep Shard(0); the metadata's mesh says "ep".
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
  // An expert weight (NOTE [Pieces of expert-parallel weights]): the ep degree that splits its
  // dim 0 (it divides shard_world), and FSDP's shard dim over the efsdp ranks (0 or 1).
  int ep_degree = 1;
  int shard_dim = 0;
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
// ["_StridedShard(dim=0, sf=2)", "Shard(0)"] for a ColwiseParallel weight under FSDP x tp 2;
// an expert weight's are over (replicate if > 1, efsdp, ep): ["Shard(1)", "Shard(0)"].
std::vector<std::string> dtensor_placements(const PieceLayout& l);

// A tensor every rank holds whole (a persistent buffer: NOTE [Persistent buffers in
// checkpoints] in checkpoint_metadata.h): "Replicate()" on each of the dims dtensor_placements
// names for the mesh `l` (replicate if > 1, shard, tp if > 1).
std::vector<std::string> replicated_placements(const PieceLayout& l);

}  // namespace fullshard
