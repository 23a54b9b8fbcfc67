// Training data and parameter init of the real backends: both must not depend on the mesh.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/data/param_init.h"
#include "core/data/text_corpus.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/module.h"

using namespace fullshard;

TEST(TextCorpus, GeneratedIsDeterministicAndByteTokens) {
  auto a = TextCorpus::generated(7, 4096), b = TextCorpus::generated(7, 4096),
       c = TextCorpus::generated(8, 4096);
  EXPECT_EQ(a.text(), b.text());
  EXPECT_NE(a.text(), c.text());
  EXPECT_GE(a.text().size(), 4096u);
  EXPECT_EQ(a.text().rfind("The ", 0), 0u);
}

TEST(TextCorpus, LabelsAreTokensShiftedByOne) {
  auto c = TextCorpus::generated(1, 10000);
  std::vector<int64_t> t(3 * 16), l(3 * 16);
  c.fill_batch(5, 2, 0, 3, 16, t.data(), l.data());
  for (int i = 0; i < 3; ++i)
    for (int s = 0; s + 1 < 16; ++s) EXPECT_EQ(l[i * 16 + s], t[i * 16 + s + 1]);
  for (auto x : t) EXPECT_TRUE(x >= 0 && x < 256);
}

// Rank r of W with b rows per rank sees global samples r*b .. r*b+b-1: the union over ranks
// equals one rank with W*b rows (what the sharded-vs-unsharded tests rely on).
RC_GTEST_PROP(TextCorpus, GlobalSamplesDoNotDependOnTheSplit, ()) {
  static const TextCorpus c = TextCorpus::generated(3, 1 << 14);
  const int world = *rc::gen::inRange(1, 5);
  const int b = *rc::gen::inRange(1, 4);
  const int seq = *rc::gen::inRange(1, 33);
  const int step = *rc::gen::inRange(0, 5);
  std::vector<int64_t> all(static_cast<size_t>(world * b * seq)), lab(all.size());
  c.fill_batch(11, step, 0, world * b, seq, all.data(), lab.data());
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> t(static_cast<size_t>(b * seq)), l(t.size());
    c.fill_batch(11, step, r * b, b, seq, t.data(), l.data());
    RC_ASSERT(std::equal(t.begin(), t.end(), all.begin() + r * b * seq));
  }
}

// NOTE [Sharding-independent init] (core/model/module.h): the shards of any world size concatenate
// to the same tensor.
RC_GTEST_PROP(ParamInit, ShardsConcatenateToTheUnshardedInit, ()) {
  const int64_t d0 = *rc::gen::inRange(0, 40);
  const int64_t d1 = *rc::gen::inRange(1, 6);
  const int world = *rc::gen::inRange(1, 9);
  const auto kind = *rc::gen::element(ParamInit::kNormal, ParamInit::kOnes, ParamInit::kZeros);
  const uint64_t key = *rc::gen::arbitrary<uint64_t>();
  auto run = [&](int w, int r) {
    const int64_t padded = padded_shard_rows(d0, w) * d1;
    OpCall op;
    op.kind = OpKind::kInitParam;
    op.outputs = {TensorRef{1, 0, TensorMeta{DType::kFloat32, {padded}}}};
    op.iargs = {shard_row_offset(d0, w, r), shard_rows(d0, w, r), d1, static_cast<int64_t>(kind),
                static_cast<int64_t>(key)};
    op.fargs = {0.02};
    std::vector<float> v = init_param_values(op);
    RC_ASSERT(v.size() == static_cast<size_t>(padded));
    return v;
  };
  std::vector<float> full = run(1, 0);
  for (int r = 0; r < world; ++r) {
    std::vector<float> shard = run(world, r);
    const int64_t rows = shard_rows(d0, world, r), off = shard_row_offset(d0, world, r);
    for (int64_t i = 0; i < rows * d1; ++i) RC_ASSERT(shard[i] == full[off * d1 + i]);
    for (size_t i = static_cast<size_t>(rows * d1); i < shard.size(); ++i)
      RC_ASSERT(shard[i] == 0.0f);  // padding
  }
}

TEST(ParamInit, NormalHasTheRequestedMoments) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double v = init_value(static_cast<int64_t>(ParamInit::kNormal), 0.02, 12345, i);
    sum += v;
    sq += v * v;
  }
  const double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(std, 0.02, 0.0005);
  EXPECT_NE(init_value(0, 0.02, 1, 5), init_value(0, 0.02, 2, 5));  // the key matters
}
