// NOTE [Reshard on load] (core/checkpoint/reshard.h): the reads a rank of a new mesh makes rebuild
// exactly its shard, for every pair of save/load world sizes 1..7 and uneven dims (rapidcheck), and
// damaged chunk lists are InputErrors.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <numeric>

#include "core/checkpoint/reshard.h"
#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"

namespace fullshard {
namespace {

// Rebuilds rank `rank`'s shard (world `load_world`) from the pieces a save over `save_world`
// stored, with values = global element index, and checks every element and that the reads
// never leave their piece.
void check_reshard(const Shape& shape, int save_world, int load_world) {
  const int64_t rn = row_numel(shape);
  const auto chunks = chunks_of_sharding(shape, save_world);
  ASSERT_EQ(chunks.size(), static_cast<size_t>(save_world));
  validate_chunks(shape, chunks, "test");
  std::vector<std::vector<int32_t>> pieces;
  for (const auto& c : chunks) {
    std::vector<int32_t> p(static_cast<size_t>(c.rows * rn));
    std::iota(p.begin(), p.end(), static_cast<int32_t>(c.row_begin * rn));
    pieces.push_back(std::move(p));
  }
  int64_t total_read = 0;
  for (int r = 0; r < load_world; ++r) {
    const int64_t rows = shard_rows(shape[0], load_world, r);
    std::vector<int32_t> shard(static_cast<size_t>(rows * rn), -1);
    uint64_t next = 0;
    for (const auto& rd : reads_for_shard(shape, 4, chunks, load_world, r)) {
      ASSERT_EQ(rd.dst_offset, next);  // in order, no gap, no overlap
      ASSERT_LE(rd.src_offset + rd.bytes, pieces[rd.chunk].size() * 4);
      ASSERT_GT(rd.bytes, 0u);
      std::memcpy(reinterpret_cast<char*>(shard.data()) + rd.dst_offset,
                  reinterpret_cast<const char*>(pieces[rd.chunk].data()) + rd.src_offset, rd.bytes);
      next += rd.bytes;
    }
    ASSERT_EQ(next, shard.size() * 4);
    const int64_t first = shard_row_offset(shape[0], load_world, r) * rn;
    for (size_t i = 0; i < shard.size(); ++i) ASSERT_EQ(shard[i], first + static_cast<int64_t>(i));
    total_read += static_cast<int64_t>(next);
  }
  EXPECT_EQ(total_read, numel(shape) * 4);  // every byte read exactly once over the new world
}

TEST(Reshard, TwoToThreeRanksOfSeventeenRows) {
  const Shape s{17, 3};
  const auto chunks = chunks_of_sharding(s, 2);  // rows 9 + 8
  EXPECT_EQ(chunks[1].row_begin, 9);
  const auto reads = reads_for_shard(s, 4, chunks, 3, 1);  // rank 1 of 3: rows 6..11
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].chunk, 0u);
  EXPECT_EQ(reads[0].src_offset, 6u * 12);
  EXPECT_EQ(reads[0].bytes, 3u * 12);
  EXPECT_EQ(reads[1].chunk, 1u);
  EXPECT_EQ(reads[1].src_offset, 0u);
  EXPECT_EQ(reads[1].dst_offset, 3u * 12);
  check_reshard(s, 2, 3);
  check_reshard({5}, 4, 7);  // empty trailing shards on both sides
  check_reshard({0, 4}, 3, 2);
}

TEST(Reshard, DamagedChunkListsAreInputErrors) {
  const Shape s{10, 2};
  auto msg = [&](std::vector<SavedChunk> c) {
    try {
      validate_chunks(s, c, "metadata.json: tensor 'w'");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg({{0, 5}, {5, 5}}), "");
  EXPECT_NE(msg({{0, 5}, {4, 6}}).find("overlaps"), std::string::npos);
  EXPECT_NE(msg({{0, 5}, {6, 4}}).find("gap after row 5"), std::string::npos);
  EXPECT_NE(msg({{0, 5}}).find("cover rows [0, 5) of 10"), std::string::npos);
  EXPECT_NE(msg({{0, 11}}).find("past dim 0"), std::string::npos);
  EXPECT_NE(msg({{0, -1}}).find("negative"), std::string::npos);
  EXPECT_NE(msg({{0, 5}}).find("tensor 'w'"), std::string::npos);
}

RC_GTEST_PROP(ReshardProp, EveryPairOfWorldSizesRebuildsEveryShard, ()) {
  const int save = *rc::gen::inRange(1, 8);
  const int load = *rc::gen::inRange(1, 8);
  Shape s{*rc::gen::inRange<int64_t>(0, 30)};
  const int extra = *rc::gen::inRange(0, 3);
  for (int i = 0; i < extra; ++i) s.push_back(*rc::gen::inRange<int64_t>(1, 5));
  check_reshard(s, save, load);
  RC_ASSERT(!::testing::Test::HasFailure());
}

}  // namespace
}  // namespace fullshard
