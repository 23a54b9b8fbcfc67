#pragma once
// Pure functions for FSDP2's dim-0 sharding (fsdp2-reference.md section 1) and the flat
// layouts of one parameter group's all-gather and reduce-scatter buffers.
//
// NOTE [torch.chunk layout]: FSDP2 shards with torch.chunk(param, W, dim=0): every chunk
// has ceil(d0/W) rows except the last non-empty one, and trailing ranks may get empty
// chunks (17 rows over 4 ranks: 5,5,5,2; 5 over 4: 2,2,1,0). Every rank nevertheless
// stores ceil(d0/W) rows (padded_sharded_param_size), zero-padded at the tail, so that the
// all-gather is even and the gathered W*ceil(d0/W) rows hold the tensor as a prefix.
#include <cstdint>
#include <vector>

#include "core/tensor/shape.h"

namespace fullshard {

// ceil(d0 / world) — rows every rank stores (0 when d0 == 0).
int64_t padded_shard_rows(int64_t d0, int world);
// Real (unpadded) rows of `rank`'s chunk, as torch.chunk gives them.
int64_t shard_rows(int64_t d0, int world, int rank);
// First global row of `rank`'s chunk (d0 for empty trailing chunks).
int64_t shard_row_offset(int64_t d0, int world, int rank);
// Elements per row (product of dims 1..n-1; 1 for a 1-D tensor).
int64_t row_numel(const Shape& shape);

// Shape of a rank's unpadded local shard; an empty shard keeps its other dims: (0, 768).
Shape sharded_shape(const Shape& shape, int world, int rank);
int64_t padded_sharded_numel(const Shape& shape, int world);

// One parameter group's flat layout: the all-gather input of every rank is the
// concatenation of the group's padded shards, in parameter order; the all-gather output
// and the reduce-scatter input are W such rows, rank-major.
struct GroupLayout {
  int world = 1;
  std::vector<int64_t> padded_numels;  // per parameter: padded shard numel
  std::vector<int64_t> offsets;        // per parameter: offset inside one rank's row
  int64_t row_numel = 0;               // sum of padded_numels (the AG input numel)
  int64_t total_numel() const { return row_numel * world; }
  // Position in the flat all-gather output / reduce-scatter input of element `e` of
  // parameter `p`'s padded unsharded tensor (W * padded_numel elements, rank-major).
  int64_t flat_index(size_t p, int64_t e) const;
};
GroupLayout make_group_layout(const std::vector<Shape>& shapes, int world);

}  // namespace fullshard
