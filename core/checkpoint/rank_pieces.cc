#include "core/checkpoint/rank_pieces.h"

#include "core/common/error.h"
#include "core/scenario/training_program.h"

namespace fullshard {

PieceLayout RankPieces::layout_of(const Param& p) const {
  // A GPT-2 c_attn piece is not one box (NOTE [Fused qkv under tensor parallelism]); the
  // launcher refuses such checkpoints first, this keeps any other caller from a wrong box.
  if (p.tp_blocks > 1 && mesh.tp_degree > 1)
    throw InputError("checkpoint", "holds " + p.fqn + ", a fused q, k, v weight split over tp " +
                                       std::to_string(mesh.tp_degree),
                     "checkpoints of tensor-parallel GPT-2 are not supported; use tp 1");
  PieceLayout l = mesh;
  if (mesh.tp_degree > 1 && p.tp_placement == TpPlacement::kShard0) l.tp_dim = 0;
  if (mesh.tp_degree > 1 && p.tp_placement == TpPlacement::kShard1) l.tp_dim = 1;
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
