// Shard layout against torch.chunk (hand-written cases) and, as properties over random
// shapes and world sizes: the all-gather of the padded shards reproduces the tensor, and
// the reduce-scatter input layout puts every parameter's shard r in row r.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "core/fsdp/reduce_policy.h"
#include "core/fsdp/shard_layout.h"

using namespace fullshard;

static std::vector<int64_t> rows(int64_t d0, int w) {
  std::vector<int64_t> r;
  for (int i = 0; i < w; ++i) r.push_back(shard_rows(d0, w, i));
  return r;
}

TEST(ShardLayout, TorchChunkCases) {
  EXPECT_EQ(rows(17, 4), (std::vector<int64_t>{5, 5, 5, 2}));
  EXPECT_EQ(rows(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(rows(3, 4), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(rows(16, 4), (std::vector<int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(rows(1, 3), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(rows(0, 2), (std::vector<int64_t>{0, 0}));
  // torch.chunk(torch.arange(10), 4) -> sizes 3,3,3,1; chunk(arange(6), 4) -> 2,2,2,(empty)
  EXPECT_EQ(rows(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(rows(6, 4), (std::vector<int64_t>{2, 2, 2, 0}));
  EXPECT_EQ(padded_shard_rows(17, 4), 5);
  EXPECT_EQ(padded_sharded_numel({17, 3}, 4), 15);
  EXPECT_EQ(shard_row_offset(5, 4, 3), 5);  // empty trailing chunk starts at the end
}

TEST(ShardLayout, EmptyShardKeepsOtherDims) {
  EXPECT_EQ(sharded_shape({3, 768}, 4, 3), (Shape{0, 768}));
  EXPECT_EQ(sharded_shape({128256, 4096}, 1024, 1017), (Shape{114, 4096}));
  EXPECT_EQ(sharded_shape({128256, 4096}, 1024, 1018), (Shape{0, 4096}));
}

TEST(ShardLayout, GroupLayoutOffsets) {
  GroupLayout g = make_group_layout({{17, 3}, {5}}, 4);
  EXPECT_EQ(g.padded_numels, (std::vector<int64_t>{15, 2}));
  EXPECT_EQ(g.offsets, (std::vector<int64_t>{0, 15}));
  EXPECT_EQ(g.row_numel, 17);
  EXPECT_EQ(g.total_numel(), 68);
  // Element 16 of param 0 (row 5, col 1) belongs to rank 1 (rows 5..9): position 1 there.
  EXPECT_EQ(g.flat_index(0, 16), 1 * 17 + 0 + 1);
  EXPECT_EQ(g.flat_index(1, 5), 2 * 17 + 15 + 1);
}

TEST(DivideFactors, MatchFsdp2) {
  auto f8 = gradient_divide_factors(8, 0, DType::kFloat16);
  EXPECT_EQ(f8.reduce_scatter_op, ReduceOp::kSum);
  EXPECT_EQ(f8.pre, 4);
  EXPECT_EQ(f8.post, 2);
  auto f16 = gradient_divide_factors(16, 0, DType::kFloat16);
  EXPECT_EQ(f16.pre, 4);
  EXPECT_EQ(f16.post, 4);
  auto f2 = gradient_divide_factors(2, 0, DType::kFloat16);
  EXPECT_EQ(f2.pre, 2);
  EXPECT_EQ(f2.post, 1);
  EXPECT_EQ(gradient_divide_factors(8, 0, DType::kFloat32).reduce_scatter_op, ReduceOp::kAvg);
  EXPECT_EQ(gradient_divide_factors(8, 0, DType::kBFloat16).reduce_scatter_op, ReduceOp::kAvg);
  EXPECT_EQ(gradient_divide_factors(1, 0, DType::kFloat32).reduce_scatter_op, ReduceOp::kSum);
  // torchtitan's set_gradient_divide_factor(1.0): a premul sum by 1 and a summing all-reduce.
  auto tt = gradient_divide_factors(8, 2, DType::kFloat32, {.factor = 1.0});
  EXPECT_EQ(tt.reduce_scatter_op, ReduceOp::kPremulSum);
  EXPECT_EQ(tt.reduce_scatter_scale, 1.0);
  EXPECT_EQ(tt.all_reduce_op, ReduceOp::kSum);
  EXPECT_EQ(tt.pre * tt.post, 1.0);
}

RC_GTEST_PROP(ShardLayoutProp, DivideFactorsMultiplyToN, ()) {
  int n = *rc::gen::inRange(1, 4097);
  auto f = gradient_divide_factors(n, 0, DType::kFloat16);
  RC_ASSERT(f.pre * f.post == static_cast<double>(n));
  // pre need not divide N (N=3 gives 2 and 1.5, as PyTorch's loop does).
  RC_ASSERT(f.pre >= 1.0);
}

TEST(DivideFactors, OddSizesFollowPytorchLoop) {
  auto f3 = gradient_divide_factors(3, 0, DType::kFloat16);
  EXPECT_EQ(f3.pre, 2);
  EXPECT_EQ(f3.post, 1.5);
}

// Every case of tests/data/oracle/gradient_divide_factors.json (torch 2.11's own function over
// shard / replicate sizes, reduce dtypes, divide factors and the forced sum) gives the same
// pre- and post-divides and the same two reduce ops, premul factor included.
TEST(DivideFactors, MatchTorchOnEveryOracleCase) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) +
                   "/tests/data/oracle/gradient_divide_factors.json");
  ASSERT_TRUE(in) << "missing tests/data/oracle/gradient_divide_factors.json";
  const auto doc = nlohmann::json::parse(in);
  const auto op_string = [](ReduceOp op, double scale) -> std::string {
    switch (op) {
      case ReduceOp::kSum: return "sum";
      case ReduceOp::kAvg: return "avg";
      case ReduceOp::kPremulSum: {
        // Python's repr of a float: the shortest string that reads back the same double.
        char buf[64];
        for (int p = 1; p <= 17; ++p) {
          std::snprintf(buf, sizeof buf, "%.*g", p, scale);
          if (std::strtod(buf, nullptr) == scale) break;
        }
        std::string s = buf;
        if (s.find_first_of(".e") == std::string::npos) s += ".0";
        return "premul_sum:" + s;
      }
      default: return "?";
    }
  };
  int n = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string dt = c[2].get<std::string>();
    const DType dtype = dt == "fp32"   ? DType::kFloat32
                        : dt == "bf16" ? DType::kBFloat16
                                       : DType::kFloat16;
    GradientDivideOptions o;
    if (!c[3].is_null()) o.factor = c[3].get<double>();
    o.force_sum_reduction_for_comms = c[4].get<bool>();
    const DivideFactors f = gradient_divide_factors(c[0].get<int>(), c[1].get<int>(), dtype, o);
    const auto& want = c[5];
    const std::string where = c.dump();
    EXPECT_EQ(f.pre, want[0].is_null() ? 1.0 : want[0].get<double>()) << where;
    EXPECT_EQ(f.post, want[1].is_null() ? 1.0 : want[1].get<double>()) << where;
    EXPECT_EQ(op_string(f.reduce_scatter_op, f.reduce_scatter_scale), want[2].get<std::string>())
        << where;
    EXPECT_EQ(op_string(f.all_reduce_op, 1.0), want[3].get<std::string>()) << where;
    ++n;
  }
  EXPECT_EQ(n, 5184);
}

RC_GTEST_PROP(ShardLayoutProp, ChunksCoverTheTensorInOrder, ()) {
  int64_t d0 = *rc::gen::inRange<int64_t>(0, 300);
  int w = *rc::gen::inRange(1, 70);
  int64_t total = 0;
  for (int r = 0; r < w; ++r) {
    RC_ASSERT(shard_row_offset(d0, w, r) == total);
    int64_t n = shard_rows(d0, w, r);
    RC_ASSERT(n >= 0);
    RC_ASSERT(n <= padded_shard_rows(d0, w));
    total += n;
  }
  RC_ASSERT(total == d0);
}

// Simulates FSDP2's data movement with real numbers: shard each tensor (padded), build each
// rank's all-gather input, all-gather (rank-major concat), copy out per parameter and check
// the unsharded prefix equals the original; then build the reduce-scatter input from full
// gradients with chunk_cat and check row r holds exactly the concatenation of shard r.
RC_GTEST_PROP(ShardLayoutProp, AllGatherReproducesTensorsAndReduceScatterRowsAreShards, ()) {
  int w = *rc::gen::inRange(1, 9);
  int np = *rc::gen::inRange(1, 4);
  std::vector<Shape> shapes;
  for (int i = 0; i < np; ++i) {
    Shape s{*rc::gen::inRange<int64_t>(1, 20)};
    if (*rc::gen::arbitrary<bool>()) s.push_back(*rc::gen::inRange<int64_t>(1, 5));
    shapes.push_back(s);
  }
  GroupLayout g = make_group_layout(shapes, w);
  std::vector<std::vector<double>> full(np);
  double v = 1;
  for (int p = 0; p < np; ++p) {
    full[p].resize(static_cast<size_t>(numel(shapes[p])));
    for (auto& x : full[p]) x = v++;
  }
  // Each rank's all-gather input row: its padded shards (zero tail), parameter order.
  std::vector<double> ag_out(static_cast<size_t>(g.total_numel()), -1);
  for (int r = 0; r < w; ++r) {
    for (int p = 0; p < np; ++p) {
      int64_t rn = row_numel(shapes[p]);
      int64_t off = shard_row_offset(shapes[p][0], w, r) * rn;
      int64_t n = shard_rows(shapes[p][0], w, r) * rn;
      for (int64_t e = 0; e < g.padded_numels[p]; ++e)
        ag_out[static_cast<size_t>(r * g.row_numel + g.offsets[p] + e)] =
            e < n ? full[p][static_cast<size_t>(off + e)] : 0.0;
    }
  }
  // Copy-out: parameter p's unsharded storage is its slice of every rank's row.
  for (int p = 0; p < np; ++p) {
    std::vector<double> unsharded;
    for (int r = 0; r < w; ++r)
      for (int64_t e = 0; e < g.padded_numels[p]; ++e)
        unsharded.push_back(ag_out[static_cast<size_t>(r * g.row_numel + g.offsets[p] + e)]);
    RC_ASSERT(unsharded.size() >= full[p].size());
    for (size_t e = 0; e < full[p].size(); ++e) RC_ASSERT(unsharded[e] == full[p][e]);
    for (size_t e = 0; e < full[p].size(); ++e)
      RC_ASSERT(ag_out[static_cast<size_t>(g.flat_index(p, static_cast<int64_t>(e)))] ==
                full[p][e]);
  }
  // chunk_cat: pad each gradient to W * padded rows and interleave.
  std::vector<double> rs_in(static_cast<size_t>(g.total_numel()), 0);
  for (int p = 0; p < np; ++p)
    for (size_t e = 0; e < full[p].size(); ++e)
      rs_in[static_cast<size_t>(g.flat_index(p, static_cast<int64_t>(e)))] = full[p][e];
  for (int r = 0; r < w; ++r) {
    for (int p = 0; p < np; ++p) {
      int64_t rn = row_numel(shapes[p]);
      int64_t off = shard_row_offset(shapes[p][0], w, r) * rn;
      int64_t n = shard_rows(shapes[p][0], w, r) * rn;
      for (int64_t e = 0; e < n; ++e)
        RC_ASSERT(rs_in[static_cast<size_t>(r * g.row_numel + g.offsets[p] + e)] ==
                  full[p][static_cast<size_t>(off + e)]);
    }
  }
}
