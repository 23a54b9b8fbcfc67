#include "core/checkpoint/rank_pieces.h"

#include "core/mesh/expert_mesh.h"
#include "core/train/training_program.h"

namespace fullshard {

PieceLayout RankPieces::layout_of(const Param& p) const {
  PieceLayout l = mesh;
  if (mesh.tp_degree > 1 && p.tp_placement == TpPlacement::kShard0) {
    l.tp_dim = 0;
    l.tp_blocks = p.tp_blocks;  // GPT-2's c_attn: NOTE [Multi-box pieces of fused weights]
  }
  if (mesh.tp_degree > 1 && p.tp_placement == TpPlacement::kShard1) l.tp_dim = 1;
  if (p.ep_degree > 1) {  // NOTE [Pieces of expert-parallel weights]
    l.ep_degree = p.ep_degree;
    l.shard_dim =
        expert_shard_dim(p.global_shape().at(0), p.ep_degree, mesh.shard_world / p.ep_degree);
  }
  return l;
}

RankPieces rank_pieces(const Scenario& s, int rank) {
  const MeshInfo info = mesh_info_for(s, rank);
  const TensorParallel tp = tensor_parallel_for(s, rank);
  RankPieces r;
  r.shard_rank = info.shard_group.index_of(rank);
  r.tp_index = tp.index;
  r.mesh.tp_degree = tp.degree;
  r.mesh.shard_world = info.shard_group.size();
  r.mesh.replicate = s.world_size() / (r.mesh.shard_world * tp.degree);
  return r;
}

}  // namespace fullshard
