#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/mesh/device_mesh.h"

using namespace fullshard;

TEST(DeviceMesh, HsdpGroups) {
  DeviceMesh m({2, 4}, {"replicate", "shard"});
  EXPECT_EQ(m.size(), 8);
  EXPECT_EQ(m.coordinates(6), (std::vector<int>{1, 2}));
  EXPECT_EQ(m.group(6, 1).ranks, (std::vector<int>{4, 5, 6, 7}));  // shard group
  EXPECT_EQ(m.group(6, 0).ranks, (std::vector<int>{2, 6}));        // replicate group
  EXPECT_EQ(m.group(6, 1).index_of(6), 2);
  EXPECT_EQ(m.dim_index("shard"), 1);
}

TEST(DeviceMesh, PostForwardGroupsAreConsecutiveRuns) {
  DeviceMesh m({8}, {"shard"});
  ProcessGroup g = m.group(5, 0);
  EXPECT_EQ(post_forward_group(g, 5, 2).ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(post_forward_group(g, 5, 4).ranks, (std::vector<int>{4, 5, 6, 7}));
}

TEST(DeviceMesh, BadShapesAreInputErrors) {
  EXPECT_THROW(DeviceMesh({}, {}), InputError);
  EXPECT_THROW(DeviceMesh({0}, {"shard"}), InputError);
  EXPECT_THROW(DeviceMesh({2, 2}, {"shard"}), InputError);
}

RC_GTEST_PROP(DeviceMeshProp, CoordinatesRoundTripAndGroupsPartition, ()) {
  int nd = *rc::gen::inRange(1, 4);
  std::vector<int> shape;
  std::vector<std::string> names;
  for (int i = 0; i < nd; ++i) {
    shape.push_back(*rc::gen::inRange(1, 6));
    names.push_back("d" + std::to_string(i));
  }
  DeviceMesh m(shape, names);
  for (int r = 0; r < m.size(); ++r) {
    RC_ASSERT(m.rank_at(m.coordinates(r)) == r);
    for (int d = 0; d < nd; ++d) {
      ProcessGroup g = m.group(r, d);
      RC_ASSERT(g.size() == shape[d]);
      RC_ASSERT(g.index_of(r) == m.coordinates(r)[d]);
      for (int member : g.ranks) RC_ASSERT(m.group(member, d).ranks == g.ranks);
    }
  }
}
