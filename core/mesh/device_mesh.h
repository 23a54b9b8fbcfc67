#pragma once
// An N-D mesh of ranks with named dims, as torch.distributed.device_mesh.DeviceMesh:
// ranks are laid out row-major over `shape` (the last dim varies fastest).
#include <string>
#include <vector>

namespace fullshard {

// The ranks one collective runs over, in group order (group rank i is ranks[i]).
struct ProcessGroup {
  std::string name;        // e.g. "shard", "replicate", "shard/post_forward[2]"
  std::vector<int> ranks;  // global ranks, in group order
  int size() const { return static_cast<int>(ranks.size()); }
  int index_of(int global_rank) const;  // -1 when not a member
  std::string key() const;              // "0,1,2,3": identifies the group across ranks
};

class DeviceMesh {
 public:
  // Throws InputError when shape is empty, has a dim < 1, or names mismatch.
  DeviceMesh(std::vector<int> shape, std::vector<std::string> dim_names);

  int ndim() const { return static_cast<int>(shape_.size()); }
  int size() const;  // product of the shape: the world size
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return names_; }
  int dim_index(const std::string& name) const;  // -1 when absent

  std::vector<int> coordinates(int rank) const;
  int rank_at(const std::vector<int>& coords) const;
  // The ranks that differ from `rank` only along `dim`, ordered by that coordinate.
  ProcessGroup group(int rank, int dim) const;
  // The ranks that differ from `rank` only along `dims` (a flattened sub-mesh, as
  // DeviceMesh's _flatten): group rank i is the row-major index over those dims.
  ProcessGroup group(int rank, const std::vector<int>& dims, std::string name) const;

 private:
  std::vector<int> shape_;
  std::vector<std::string> names_;
};

// FSDP2's post-forward mesh for int reshard_after_forward N (_fsdp_init.py
// _get_post_forward_mesh_info): the shard group split into consecutive runs of N ranks.
// Requires shard.size() % n == 0.
ProcessGroup post_forward_group(const ProcessGroup& shard, int global_rank, int n);

}  // namespace fullshard
