// NOTE [Strided pieces of tensor-parallel weights] and NOTE [Pieces as boxes]: the pieces a
// save under any FSDP x tp layout stores tile the global tensor, and the reads a rank of any
// other layout makes rebuild exactly its piece (values = global element index), reading every
// byte it needs once; damaged boxes are InputErrors.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "core/checkpoint/checkpoint_metadata.h"
#include "core/checkpoint/piece_layout.h"
#include "core/common/error.h"
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
