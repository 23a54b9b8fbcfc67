#include "core/fsdp/shard_layout.h"

#include "core/common/error.h"

namespace fullshard {

int64_t padded_shard_rows(int64_t d0, int world) {
  FULLSHARD_CHECK(world >= 1 && d0 >= 0, "bad shard arguments");
  return (d0 + world - 1) / world;
}

int64_t shard_row_offset(int64_t d0, int world, int rank) {
  int64_t c = padded_shard_rows(d0, world);
  int64_t off = c * rank;
  return off < d0 ? off : d0;
}

int64_t shard_rows(int64_t d0, int world, int rank) {
  int64_t c = padded_shard_rows(d0, world);
  int64_t off = shard_row_offset(d0, world, rank);
  int64_t rest = d0 - off;
  return rest < c ? rest : c;
}

int64_t row_numel(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

Shape sharded_shape(const Shape& shape, int world, int rank) {
  FULLSHARD_CHECK(!shape.empty(), "cannot shard a 0-d tensor");
  Shape s = shape;
  s[0] = shard_rows(shape[0], world, rank);
  return s;
}

int64_t padded_sharded_numel(const Shape& shape, int world) {
  FULLSHARD_CHECK(!shape.empty(), "cannot shard a 0-d tensor");
  return padded_shard_rows(shape[0], world) * row_numel(shape);
}

int64_t GroupLayout::flat_index(size_t p, int64_t e) const {
  int64_t per = padded_numels[p];
  FULLSHARD_CHECK(per > 0 && e >= 0 && e < per * world, "element outside padded parameter");
  int64_t rank = e / per;
  return rank * row_numel + offsets[p] + (e % per);
}

GroupLayout make_group_layout(const std::vector<Shape>& shapes, int world) {
  GroupLayout g;
  g.world = world;
  for (const auto& s : shapes) {
    g.offsets.push_back(g.row_numel);
    g.padded_numels.push_back(padded_sharded_numel(s, world));
    g.row_numel += g.padded_numels.back();
  }
  return g;
}

}  // namespace fullshard
