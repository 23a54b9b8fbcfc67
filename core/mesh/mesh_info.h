#pragma once
// The process groups one rank trains over (built from its DeviceMesh): what FSDP, gradient
// clipping and the data loader need to know of the mesh.
#include <optional>

#include "core/mesh/device_mesh.h"

namespace fullshard {

struct MeshInfo {
  ProcessGroup shard_group;
  std::optional<ProcessGroup> replicate_group;
  // With a tp dim: the tp group, and the group over the shard and tp dims (gradient norms of
  // tp-sharded parameters sum over it).
  std::optional<ProcessGroup> tp_group;
  std::optional<ProcessGroup> shard_tp_group;
  // With a pp dim: the pipeline group (the gradient norm's squares sum over it, as torchtitan's
  // clip_grad_norm_ with a pp mesh).
  std::optional<ProcessGroup> pp_group;
  // With a cp dim: the cp group (ring attention's K / V exchange). FSDP's shard_group is then
  // the flattened (shard, cp) group and shard_tp_group spans (shard, cp, tp), as torchtitan
  // shards parameters over its dp_shard_cp ("fsdp") mesh.
  std::optional<ProcessGroup> cp_group;
  // With expert parallelism (expert_parallel.degree > 1, core/mesh/expert_mesh.h): the ep group
  // (the token all-to-all; each holds every expert once) and the expert-FSDP group the routed
  // experts are fully_shard-ed over (torchtitan's "ep" and "efsdp" mesh dims).
  std::optional<ProcessGroup> ep_group;
  std::optional<ProcessGroup> efsdp_group;
  // Data parallelism: this rank's index over the replicate and shard dims, and their size
  // (ranks of one tp group, and of one cp group, read the same batch).
  int dp_rank = 0;
  int dp_size = 1;
};

}  // namespace fullshard
