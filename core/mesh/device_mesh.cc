#include "core/mesh/device_mesh.h"

#include <algorithm>

#include "core/common/error.h"

namespace fullshard {

int ProcessGroup::index_of(int global_rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

std::string ProcessGroup::key() const {
  std::string k;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) k += ',';
    k += std::to_string(ranks[i]);
  }
  return k;
}

DeviceMesh::DeviceMesh(std::vector<int> shape, std::vector<std::string> dim_names)
    : shape_(std::move(shape)), names_(std::move(dim_names)) {
  if (shape_.empty()) throw InputError("mesh.shape", "is empty", "give at least one dim, e.g. [8]");
  if (names_.size() != shape_.size())
    throw InputError("mesh.dim_names",
                     "has " + std::to_string(names_.size()) + " names for " +
                         std::to_string(shape_.size()) + " dims",
                     "give one name per mesh dim");
  for (size_t i = 0; i < shape_.size(); ++i)
    if (shape_[i] < 1)
      throw InputError("mesh.shape[" + std::to_string(i) + "]", "is " + std::to_string(shape_[i]),
                       "every mesh dim must be >= 1");
}

int DeviceMesh::size() const {
  int n = 1;
  for (int d : shape_) n *= d;
  return n;
}

int DeviceMesh::dim_index(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

std::vector<int> DeviceMesh::coordinates(int rank) const {
  FULLSHARD_CHECK(rank >= 0 && rank < size(), "rank out of mesh");
  std::vector<int> c(shape_.size());
  for (int i = ndim() - 1; i >= 0; --i) {
    c[i] = rank % shape_[i];
    rank /= shape_[i];
  }
  return c;
}

int DeviceMesh::rank_at(const std::vector<int>& coords) const {
  FULLSHARD_CHECK(coords.size() == shape_.size(), "coordinate rank mismatch");
  int r = 0;
  for (int i = 0; i < ndim(); ++i) {
    FULLSHARD_CHECK(coords[i] >= 0 && coords[i] < shape_[i], "coordinate out of mesh");
    r = r * shape_[i] + coords[i];
  }
  return r;
}

ProcessGroup DeviceMesh::group(int rank, int dim) const {
  FULLSHARD_CHECK(dim >= 0 && dim < ndim(), "mesh dim out of range");
  ProcessGroup g;
  g.name = names_[dim];
  auto c = coordinates(rank);
  for (int i = 0; i < shape_[dim]; ++i) {
    c[dim] = i;
    g.ranks.push_back(rank_at(c));
  }
  return g;
}

ProcessGroup DeviceMesh::group(int rank, const std::vector<int>& dims, std::string name) const {
  ProcessGroup g;
  g.name = std::move(name);
  auto c = coordinates(rank);
  int n = 1;
  for (int d : dims) {
    FULLSHARD_CHECK(d >= 0 && d < ndim(), "mesh dim out of range");
    n *= shape_[d];
  }
  for (int i = 0; i < n; ++i) {
    int rest = i;
    for (size_t k = dims.size(); k-- > 0;) {
      c[dims[k]] = rest % shape_[dims[k]];
      rest /= shape_[dims[k]];
    }
    g.ranks.push_back(rank_at(c));
  }
  return g;
}

ProcessGroup post_forward_group(const ProcessGroup& shard, int global_rank, int n) {
  FULLSHARD_CHECK(n >= 1 && shard.size() % n == 0, "post-forward size must divide shard size");
  int idx = shard.index_of(global_rank);
  FULLSHARD_CHECK(idx >= 0, "rank not in shard group");
  ProcessGroup g;
  int start = (idx / n) * n;
  g.name = shard.name + "/post_forward[" + std::to_string(n) + "]";
  g.ranks.assign(shard.ranks.begin() + start, shard.ranks.begin() + start + n);
  return g;
}

}  // namespace fullshard
