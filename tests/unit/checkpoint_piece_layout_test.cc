// The pieces a save under any FSDP x tp or FSDP x ep layout stores tile the global tensor, and
// the reads a rank of any other layout makes rebuild exactly its piece (values = global element
// index), reading every byte it needs once; damaged boxes are InputErrors. See
// NOTE [Strided pieces of tensor-parallel weights], NOTE [Pieces of expert-parallel weights]
// and NOTE [Pieces as boxes].
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/checkpoint_metadata.h"
#include "core/checkpoint/piece_layout.h"
#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "tests/support/input_error.h"

namespace fullshard {
namespace {
using testing::input_error_of;

// The global tensor's values: element i (row-major) is i.
std::vector<int32_t> stored(const Shape& global, const ChunkBox& box) {
  std::vector<int32_t> v;
  const int64_t rows = box.lengths[0], cols = box.lengths.size() > 1 ? box.lengths[1] : 1;
  const int64_t gcols = global.size() > 1 ? global[1] : 1,
                c0 = box.offsets.size() > 1 ? box.offsets[1] : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v.push_back(static_cast<int32_t>((box.offsets[0] + r) * gcols + c0 + c));
  return v;
}

PieceLayout random_layout(const Shape& global, int dims) {
  PieceLayout l;
  l.shard_world = *rc::gen::inRange(1, 6);
  l.tp_dim = *rc::gen::inRange(-1, dims);
  if (l.tp_dim >= 0) {
    std::vector<int> divisors;
    for (int t = 1; t <= 4; ++t)
      if (global[static_cast<size_t>(l.tp_dim)] % t == 0) divisors.push_back(t);
    l.tp_degree = *rc::gen::elementOf(divisors);
  } else {
    l.tp_degree = *rc::gen::inRange(1, 4);
  }
  return l;
}

RC_GTEST_PROP(PieceLayoutProp, AnyLayoutLoadsOnAnyLayout, ()) {
  const int dims = *rc::gen::inRange(1, 3);
  Shape global = {*rc::gen::inRange<int64_t>(0, 13) * 2};
  if (dims == 2) global.push_back(*rc::gen::inRange<int64_t>(1, 5) * 4);
  if (global[0] == 0) global[0] = 4;
  const PieceLayout save = random_layout(global, dims), load = random_layout(global, dims);
  const auto pieces = stored_pieces(global, save);
  std::vector<ChunkBox> boxes;
  std::vector<std::vector<int32_t>> data;
  for (const auto& p : pieces) {
    RC_ASSERT(p.file_index >= 0 && p.file_index < piece_files(save));
    boxes.push_back(p.box);
    data.push_back(stored(global, p.box));
  }
  validate_boxes(global, boxes, "test");  // they tile the tensor
  for (int t = 0; t < load.tp_degree; ++t)
    for (int s = 0; s < load.shard_world; ++s) {
      const ChunkBox want = piece_box(global, load, t, s);
      const auto expect = stored(global, want);
      std::vector<int32_t> got(expect.size(), -1);
      uint64_t total = 0;
      for (const auto& r : reads_for_box(global, 4, boxes, want)) {
        RC_ASSERT(r.src_offset + r.bytes <= data[r.chunk].size() * 4);
        RC_ASSERT(r.dst_offset + r.bytes <= got.size() * 4);
        std::memcpy(reinterpret_cast<char*>(got.data()) + r.dst_offset,
                    reinterpret_cast<const char*>(data[r.chunk].data()) + r.src_offset, r.bytes);
        total += r.bytes;
      }
      RC_ASSERT(total == got.size() * 4);  // each byte once
      RC_ASSERT(got == expect);
    }
}

// The values a piece of `global` (any rank) holds: element i (row-major) is i.
std::vector<int32_t> stored_nd(const Shape& global, const ChunkBox& box) {
  std::vector<int32_t> v;
  const int64_t n = box_numel(box);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rest = k, g = 0, stride = 1;
    for (size_t d = global.size(); d-- > 0;) {
      g += (box.offsets[d] + rest % box.lengths[d]) * stride;
      rest /= box.lengths[d];
      stride *= global[d];
    }
    v.push_back(static_cast<int32_t>(g));
  }
  return v;
}

// An expert weight [E, a, b] under FSDP `shard` x ep (NOTE [Pieces of expert-parallel
// weights]), efsdp = shard / ep sharding dim 0 or, when it exceeds E / ep, dim 1.
PieceLayout random_expert_layout(int64_t E, int64_t a) {
  std::vector<int> eps;
  for (int ep = 1; ep <= 4; ++ep)
    if (E % ep == 0) eps.push_back(ep);
  PieceLayout l;
  l.ep_degree = *rc::gen::elementOf(eps);
  std::vector<int> efsdps;
  for (int f = 1; f <= 4; ++f)
    if (f <= E / l.ep_degree || a % f == 0) efsdps.push_back(f);
  const int efsdp = *rc::gen::elementOf(efsdps);
  l.shard_world = efsdp * l.ep_degree;
  l.shard_dim = efsdp > E / l.ep_degree ? 1 : 0;
  l.replicate = *rc::gen::inRange(1, 3);
  return l;
}

// Saved under one random (ep, efsdp) and loaded under another: the stored pieces tile the
// tensor once, every shard rank's box is its local tensor's FSDP piece (E / ep experts moved by
// the ep index), and each rank of the loading layout rebuilds its piece reading each byte once.
RC_GTEST_PROP(PieceLayoutProp, ExpertLayoutsTileAndLoadOnAnyExpertLayout, ()) {
  const int64_t E = *rc::gen::element<int64_t>(1, 2, 3, 4, 6, 8, 12);
  const Shape global = {E, *rc::gen::element<int64_t>(2, 4, 12), *rc::gen::inRange<int64_t>(1, 4)};
  const PieceLayout save = random_expert_layout(E, global[1]);
  const PieceLayout load = random_expert_layout(E, global[1]);
  RC_TAG("ep " + std::to_string(save.ep_degree) + " Shard(" + std::to_string(save.shard_dim) + ")");
  std::vector<ChunkBox> boxes;
  std::vector<std::vector<int32_t>> data;
  int64_t total_elems = 0;
  for (const auto& p : stored_pieces(global, save)) {
    RC_ASSERT(p.file_index >= 0 && p.file_index < piece_files(save));
    boxes.push_back(p.box);
    data.push_back(stored_nd(global, p.box));
    total_elems += box_numel(p.box);
  }
  RC_ASSERT(static_cast<int>(boxes.size()) == save.shard_world);  // one piece per shard rank
  RC_ASSERT(total_elems == numel(global));
  validate_boxes(global, boxes, "test");  // they tile the tensor exactly once
  const int64_t El = E / save.ep_degree, efsdp = save.shard_world / save.ep_degree;
  for (int s = 0; s < save.shard_world; ++s) {
    const ChunkBox b = piece_box(global, save, 0, s);
    const int64_t e = s % save.ep_degree, f = s / save.ep_degree;
    RC_ASSERT(b.offsets[0] >= e * El && b.offsets[0] + b.lengths[0] <= (e + 1) * El);
    if (save.shard_dim == 1) {
      RC_ASSERT(b.lengths == (Shape{El, global[1] / efsdp, global[2]}));
      RC_ASSERT(b.offsets == (Shape{e * El, f * (global[1] / efsdp), 0}));
    } else {
      RC_ASSERT(b.lengths[0] == shard_rows(El, static_cast<int>(efsdp), static_cast<int>(f)));
    }
  }
  for (int s = 0; s < load.shard_world; ++s) {
    const ChunkBox want = piece_box(global, load, 0, s);
    const auto expect = stored_nd(global, want);
    std::vector<int32_t> got(expect.size(), -1);
    uint64_t bytes = 0;
    for (const auto& r : reads_for_box(global, 4, boxes, want)) {
      RC_ASSERT(r.src_offset + r.bytes <= data[r.chunk].size() * 4);
      RC_ASSERT(r.dst_offset + r.bytes <= got.size() * 4);
      std::memcpy(reinterpret_cast<char*>(got.data()) + r.dst_offset,
                  reinterpret_cast<const char*>(data[r.chunk].data()) + r.src_offset, r.bytes);
      bytes += r.bytes;
    }
    RC_ASSERT(bytes == got.size() * 4);  // each byte once
    RC_ASSERT(got == expect);
  }
}

// tiny-moe-ep2-cpu4's w1 [4, 16, 8] (4 experts, FSDP 4 x ep 2, efsdp 2: Shard(0)), and 2 experts
// on the same mesh (efsdp 2 > 1 expert per rank: Shard(1)); placements over (efsdp, ep).
TEST(PieceLayout, ExpertPiecesSelectTheirEpBlock) {
  PieceLayout l;
  l.shard_world = 4;
  l.ep_degree = 2;
  // Shard rank 1 is ep index 1, efsdp index 0: expert 2 (the first of ep block [2, 4)).
  EXPECT_EQ(piece_box({4, 16, 8}, l, 0, 1), (ChunkBox{{2, 0, 0}, {1, 16, 8}}));
  EXPECT_EQ(piece_box({4, 16, 8}, l, 0, 2), (ChunkBox{{1, 0, 0}, {1, 16, 8}}));
  EXPECT_EQ(dtensor_placements(l),
            (std::vector<std::string>{"_StridedShard(dim=0, sf=2)", "Shard(0)"}));
  l.shard_dim = 1;
  EXPECT_EQ(piece_box({2, 16, 8}, l, 0, 3), (ChunkBox{{1, 8, 0}, {1, 8, 8}}));
  l.replicate = 2;
  EXPECT_EQ(dtensor_placements(l),
            (std::vector<std::string>{"Replicate()", "Shard(1)", "Shard(0)"}));
}

// The metadata of an FSDP 4 x ep 2 save says mesh.ep and reads back the same; an ep that does
// not divide the shard dim is a damaged metadata, named.
TEST(PieceLayout, MetadataMeshEpRoundTrips) {
  PieceLayout l;
  l.shard_world = 4;
  l.ep_degree = 2;
  CheckpointMetadata m;
  m.world_size = m.shard = 4;
  m.ep = 2;
  for (int r = 0; r < 4; ++r) m.files.push_back({shard_file_name(r, 4), 1024});
  m.tensors.push_back(placed_tensor("param/w1", "F32", {4, 16, 8}, l));
  nlohmann::json j = metadata_to_json(m);
  EXPECT_EQ(j["mesh"]["ep"], 2);
  const CheckpointMetadata back = metadata_from_json(j, "metadata.json");
  EXPECT_EQ(back.ep, 2);
  EXPECT_EQ(back.tensors[0].chunks[1].box, m.tensors[0].chunks[1].box);
  EXPECT_EQ(back.tensors[0].placements, m.tensors[0].placements);
  j["mesh"]["ep"] = 3;
  EXPECT_NE(input_error_of([&] {
              metadata_from_json(j, "metadata.json");
            }).find("mesh.ep: is 3, which does not divide shard 4"),
            std::string::npos);
}

// A persistent buffer (NOTE [Persistent buffers in checkpoints]): whole in file 0 of any saving
// mesh, Replicate() on each of its dims, and the same after a metadata round trip.
TEST(PieceLayout, ReplicatedBufferIsOneWholeChunkInFileZeroAndRoundTrips) {
  PieceLayout mesh;
  mesh.replicate = 2;
  mesh.shard_world = 2;
  mesh.tp_degree = 2;
  CheckpointMetadata m;
  m.world_size = 8;
  m.replicate = m.shard = m.tp = 2;
  for (int f = 0; f < piece_files(mesh); ++f) m.files.push_back({shard_file_name(f, 4), 1024});
  m.tensors.push_back(replicated_tensor("buffer/layers.1.moe.expert_bias", "F32", {6}, mesh));
  const CheckpointTensor& t = m.tensors[0];
  EXPECT_EQ(t.placements, (std::vector<std::string>{"Replicate()", "Replicate()", "Replicate()"}));
  ASSERT_EQ(t.chunks.size(), 1u);
  EXPECT_EQ(t.chunks[0].file, "shard-00000-of-00004.safetensors");
  EXPECT_EQ(t.chunks[0].box, (ChunkBox{{0}, {6}}));
  const CheckpointMetadata back = metadata_from_json(metadata_to_json(m), "metadata.json");
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].name, t.name);
  EXPECT_EQ(back.tensors[0].shape, t.shape);
  EXPECT_EQ(back.tensors[0].placements, t.placements);
  EXPECT_EQ(back.tensors[0].chunks[0].file, t.chunks[0].file);
  EXPECT_EQ(back.tensors[0].chunks[0].box, t.chunks[0].box);
  // Plain FSDP: one dim.
  PieceLayout fsdp;
  fsdp.shard_world = 3;
  const CheckpointTensor f = replicated_tensor("buffer/b", "F32", {2, 3}, fsdp);
  EXPECT_EQ(f.placements, (std::vector<std::string>{"Replicate()"}));
  EXPECT_EQ(f.chunks[0].file, shard_file_name(0, 3));
  EXPECT_EQ(f.chunks[0].box, (ChunkBox{{0, 0}, {2, 3}}));
}

TEST(PieceLayout, ColwiseWeightUnderFsdpIsStrided) {
  // wq [8, 4] under dp_shard 2 x tp 2: tp rank t holds rows [4t, 4t + 4), FSDP rank s two of them.
  PieceLayout l{0, 2, 2, 1};
  EXPECT_EQ(piece_box({8, 4}, l, 1, 0), (ChunkBox{{4, 0}, {2, 4}}));
  EXPECT_EQ(piece_box({8, 4}, l, 0, 1), (ChunkBox{{2, 0}, {2, 4}}));
  EXPECT_EQ(dtensor_placements(l),
            (std::vector<std::string>{"_StridedShard(dim=0, sf=2)", "Shard(0)"}));
  // wo [4, 8] rowwise: tp rank 1's column block [4, 8), FSDP rank 1's rows [2, 4).
  l.tp_dim = 1;
  EXPECT_EQ(piece_box({4, 8}, l, 1, 1), (ChunkBox{{2, 4}, {2, 4}}));
  EXPECT_EQ(dtensor_placements(l), (std::vector<std::string>{"Shard(0)", "Shard(1)"}));
  // A norm weight, replicated over tp: only tp rank 0's pieces are stored.
  l.tp_dim = -1;
  l.replicate = 2;
  const auto p = stored_pieces({5}, l);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].file_index, 2);  // shard rank 1, tp rank 0 of 2
  EXPECT_EQ(p[1].box, (ChunkBox{{3}, {2}}));
  EXPECT_EQ(dtensor_placements(l),
            (std::vector<std::string>{"Replicate()", "Shard(0)", "Replicate()"}));
}

TEST(PieceLayout, DamagedBoxesAreInputErrors) {
  const Shape s = {4, 8};
  const ChunkBox a{{0, 0}, {4, 4}}, b{{0, 4}, {4, 4}};
  EXPECT_EQ(input_error_of([&] { validate_boxes(s, {a, b}, "w"); }), "");
  EXPECT_NE(input_error_of([&] {
              validate_boxes(s, {a, ChunkBox{{0, 3}, {4, 4}}}, "w");
            }).find("overlaps chunk"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              validate_boxes(s, {a, ChunkBox{{0, 5}, {4, 4}}}, "w");
            }).find("ends past dim 1"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { validate_boxes(s, {a}, "w"); }).find("cover 16 of 32 elements"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              validate_boxes(s, {a, ChunkBox{{0}, {4}}}, "w");
            }).find("1 lengths for a 2-d"),
            std::string::npos);
  // Row ranges keep the row messages.
  EXPECT_NE(input_error_of([&] {
              validate_boxes(s, {rows_box(s, 0, 2), rows_box(s, 3, 1)}, "w");
            }).find("gap after row 2"),
            std::string::npos);
}

// A version 1 metadata (row ranges) still loads, as boxes.
TEST(PieceLayout, VersionOneMetadataReadsAsBoxes) {
  nlohmann::json j = {{"format", "fullshard-checkpoint"},
                      {"version", 1},
                      {"scenario", "t"},
                      {"arch", "llama"},
                      {"step", 1},
                      {"next_step", 1},
                      {"seed", 0},
                      {"world_size", 2},
                      {"mesh", {{"replicate", 1}, {"shard", 2}}},
                      {"optimizer_steps", 1},
                      {"files", {{{"name", "a"}, {"bytes", 8}}, {{"name", "b"}, {"bytes", 8}}}},
                      {"tensors",
                       {{{"name", "param/w"},
                         {"dtype", "F32"},
                         {"shape", {3, 2}},
                         {"chunks",
                          {{{"file", "a"}, {"row_begin", 0}, {"rows", 2}},
                           {{"file", "b"}, {"row_begin", 2}, {"rows", 1}}}}}}}};
  const CheckpointMetadata m = metadata_from_json(j, "metadata.json");
  EXPECT_EQ(m.tp, 1);
  EXPECT_EQ(m.tensors[0].chunks[1].box, (ChunkBox{{2, 0}, {1, 2}}));
  const auto back = metadata_to_json(m);
  EXPECT_EQ(back["version"], 2);
  EXPECT_EQ(back["tensors"][0]["chunks"][1]["offsets"], nlohmann::json({2, 0}));
  EXPECT_EQ(metadata_from_json(back, "again").tensors[0].chunks[1].box, m.tensors[0].chunks[1].box);
}

}  // namespace
}  // namespace fullshard
