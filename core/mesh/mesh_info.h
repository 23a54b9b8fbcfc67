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
  // Data parallelism: this rank's index over the replicate and shard dims, and their size
  // (ranks of one tp group read the same batch).
  int dp_rank = 0;
  int dp_size = 1;
};

}  // namespace fullshard
