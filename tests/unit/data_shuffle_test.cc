// training.data.sampling "shuffle" (NOTE [Shuffled epochs]): every window once per epoch, an
// order per epoch, the same on every mesh, continued by a resume.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/data/text_corpus.h"
#include "core/data/window_order.h"

using namespace fullshard;

RC_GTEST_PROP(ShuffledWindow, IsAPermutationOfTheEpochsWindows, ()) {
  const int64_t windows = *rc::gen::inRange<int64_t>(1, 3000);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const int64_t epoch = *rc::gen::inRange<int64_t>(0, 1000);
  std::vector<int> seen(static_cast<size_t>(windows), 0);
  for (int64_t i = 0; i < windows; ++i) {
    const int64_t w = shuffled_window(seed, epoch, i, windows);
    RC_ASSERT(w >= 0 && w < windows);
    ++seen[static_cast<size_t>(w)];
  }
  RC_ASSERT(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST(ShuffledWindow, EpochsAndSeedsHaveTheirOwnOrder) {
  auto order = [](uint64_t seed, int64_t epoch, int64_t n) {
    std::vector<int64_t> o;
    for (int64_t i = 0; i < n; ++i) o.push_back(shuffled_window(seed, epoch, i, n));
    return o;
  };
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(order(1, 0, 100), identity);
  EXPECT_NE(order(1, 0, 100), order(1, 1, 100));
  EXPECT_NE(order(1, 0, 100), order(2, 0, 100));
  EXPECT_EQ(order(1, 3, 100), order(1, 3, 100));
  EXPECT_EQ(shuffled_window(5, 0, 0, 1), 0);
  // Large data sets cost no memory: a window of a 10^12-window epoch.
  EXPECT_LT(shuffled_window(5, 2, 999'999'999'999, 1'000'000'000'000), 1'000'000'000'000);
}

namespace {

// A token data set 0, 1, 2, ... n-1: a sequence's first token is its window's start.
BatchSource counting_source(int64_t n, int world, int64_t batch) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0u);
  BatchSource b;
  b.tokens = tokens_in_memory(std::move(t), "counting");
  b.shuffle = true;
  b.seed = 42;
  b.rank_batches.assign(static_cast<size_t>(world), batch);
  return b;
}

OpCall load_op(int64_t step, int64_t batch, int64_t seq) {
  OpCall op;
  op.kind = OpKind::kLoadBatch;
  op.outputs = {TensorRef{1, 0, TensorMeta{DType::kInt64, {batch, seq}}},
                TensorRef{2, 0, TensorMeta{DType::kInt64, {batch, seq}}}};
  op.iargs = {step, 0, 1};
  return op;
}

// The windows steps [first, first + steps) read, in global sample order, `world` ranks of `batch`.
std::vector<int64_t> windows_read(BatchSource& b, int world, int64_t batch, int64_t seq,
                                  int64_t first, int64_t steps) {
  std::vector<int64_t> out;
  for (int64_t step = first; step < first + steps; ++step)
    for (int r = 0; r < world; ++r) {
      std::vector<int64_t> t(static_cast<size_t>(batch * seq)), l(t.size());
      b.fill(load_op(step, batch, seq), r, world, t.data(), l.data());
      for (int64_t i = 0; i < batch; ++i) {
        EXPECT_EQ(t[static_cast<size_t>(i * seq)] % seq, 0);
        EXPECT_EQ(l[static_cast<size_t>(i * seq)], t[static_cast<size_t>(i * seq)] + 1);
        out.push_back(t[static_cast<size_t>(i * seq)] / seq);
      }
    }
  return out;
}

}  // namespace

TEST(ShuffledEpochs, EveryWindowOncePerEpochTheSameForOneAndThreeRanks) {
  const int64_t seq = 4, windows = 30;  // 121 tokens: (121 - 1) / 4 = 30 windows
  BatchSource one = counting_source(121, 1, 6), three = counting_source(121, 3, 2);
  const std::vector<int64_t> a = windows_read(one, 1, 6, seq, 0, 10);  // 60 samples: two epochs
  EXPECT_EQ(a, windows_read(three, 3, 2, seq, 0, 10));
  for (int e = 0; e < 2; ++e) {
    std::vector<int64_t> epoch(a.begin() + e * windows, a.begin() + (e + 1) * windows);
    for (int64_t i = 0; i < windows; ++i)
      EXPECT_EQ(epoch[static_cast<size_t>(i)], shuffled_window(42, e, i, windows));
    std::sort(epoch.begin(), epoch.end());
    for (int64_t i = 0; i < windows; ++i)
      EXPECT_EQ(epoch[static_cast<size_t>(i)], i) << "epoch " << e;
  }
  EXPECT_NE(std::vector<int64_t>(a.begin(), a.begin() + windows),
            std::vector<int64_t>(a.begin() + windows, a.end()));
  const DataPosition p = one.position(7, 6, seq);
  EXPECT_EQ(p.samples, 42);
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.window, 12);
}

TEST(ShuffledEpochs, AResumeWithAnotherBatchContinuesThePermutation) {
  const int64_t seq = 4;
  BatchSource straight = counting_source(121, 1, 6);
  const std::vector<int64_t> all = windows_read(straight, 1, 6, seq, 0, 10);
  // Stopped after 3 steps (18 samples); resumed on 3 ranks of 4: step 0 of the resumed run
  // reads sample 18 on, as runner/checkpoint.cc sets sample_base from the saved count.
  BatchSource resumed = counting_source(121, 3, 4);
  resumed.sample_base = 18;
  const std::vector<int64_t> rest = windows_read(resumed, 3, 4, seq, 0, 3);  // 36 samples
  EXPECT_EQ(rest, std::vector<int64_t>(all.begin() + 18, all.begin() + 54));
}
