// Context parallelism's sequence layout and ring schedule (core/runtime/cp_layout.h) over random
// cp degrees and sequence lengths: every token lands on exactly one rank, each rank's tokens are
// in increasing position (so a local causal mask is the global one), every causal (query, key)
// pair is computed exactly once over the rounds, no other pair is, and every rank does the same
// work (NOTE [Context-parallel layout], NOTE [Ring attention rounds]).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <vector>

#include "core/runtime/cp_layout.h"

namespace fullshard {
namespace {

RC_GTEST_PROP(CpLayoutProp, EveryTokenOnExactlyOneRankInOrder, ()) {
  const int cp = *rc::gen::inRange(1, 17);
  const int64_t chunk = *rc::gen::inRange(1, 33);
  const int64_t S = 2 * cp * chunk, L = S / cp;
  std::vector<int> owner(static_cast<size_t>(S), -1);
  for (int r = 0; r < cp; ++r)
    for (int64_t t = 0; t < L; ++t) {
      const int64_t p = cp_global_position(t, L, cp, r);
      RC_ASSERT(p >= 0 && p < S);
      RC_ASSERT(owner[static_cast<size_t>(p)] == -1);  // no token twice
      owner[static_cast<size_t>(p)] = r;
      if (t > 0) RC_ASSERT(p > cp_global_position(t - 1, L, cp, r));
    }
  for (int o : owner) RC_ASSERT(o >= 0);  // every token somewhere
  // Head chunk r and tail chunk 2 cp - 1 - r (PyTorch's _HeadTailLoadBalancer).
  const int r = *rc::gen::inRange(0, cp);
  RC_ASSERT(cp_global_position(0, L, cp, r) == (cp == 1 ? 0 : r * chunk));
  RC_ASSERT(cp_global_position(L - 1, L, cp, r) == (cp == 1 ? S - 1 : (2 * cp - r) * chunk - 1));
}

RC_GTEST_PROP(CpLayoutProp, RingRoundsComputeEachCausalPairOnceAndBalanceTheWork, ()) {
  const int cp = *rc::gen::inRange(1, 9);
  const int64_t chunk = *rc::gen::inRange(1, 9);
  const int64_t S = 2 * cp * chunk, L = S / cp;
  // count[q][k]: how often the pair (query position q, key position k) is computed.
  std::vector<int> count(static_cast<size_t>(S * S), 0);
  std::vector<int64_t> work(static_cast<size_t>(cp), 0);
  for (int r = 0; r < cp; ++r) {
    std::vector<bool> seen(static_cast<size_t>(cp), false);
    for (int i = 0; i < cp; ++i) {
      const CpRound rd = cp_round(i, r, cp, L);
      RC_ASSERT(!seen[static_cast<size_t>(rd.source)]);  // every source's K / V once
      seen[static_cast<size_t>(rd.source)] = true;
      RC_ASSERT(rd.causal == (i == 0));
      RC_ASSERT(rd.q_begin + rd.q_len <= L && rd.kv_begin + rd.kv_len <= L);
      RC_ASSERT(rd.partial == (rd.q_begin > 0));
      for (int64_t a = rd.q_begin; a < rd.q_begin + rd.q_len; ++a)
        for (int64_t b = rd.kv_begin; b < rd.kv_begin + rd.kv_len; ++b) {
          if (rd.causal && b > a) continue;  // the local causal mask
          const int64_t q = cp_global_position(a, L, cp, r);
          const int64_t k = cp_global_position(b, L, cp, rd.source);
          ++count[static_cast<size_t>(q * S + k)];
          ++work[static_cast<size_t>(r)];
        }
    }
  }
  for (int64_t q = 0; q < S; ++q)
    for (int64_t k = 0; k < S; ++k)
      RC_ASSERT(count[static_cast<size_t>(q * S + k)] == (k <= q ? 1 : 0));
  // Balanced: round 0 costs L (L + 1) / 2 pairs, every other round L x L / 2.
  for (int r = 0; r < cp; ++r)
    RC_ASSERT(work[static_cast<size_t>(r)] == L * (L + 1) / 2 + (cp - 1) * L * L / 2);
}

TEST(CpLayout, TwoRanksOfEightTokens) {
  // S = 8, cp = 2: chunks of 2; rank 0 holds 0 1 6 7, rank 1 holds 2 3 4 5.
  std::vector<int64_t> r0, r1;
  for (int64_t t = 0; t < 4; ++t) {
    r0.push_back(cp_global_position(t, 4, 2, 0));
    r1.push_back(cp_global_position(t, 4, 2, 1));
  }
  EXPECT_EQ(r0, (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(r1, (std::vector<int64_t>{2, 3, 4, 5}));
  // Rank 1, round 1 reads rank 0's K / V: all its queries against rank 0's head chunk.
  const CpRound a = cp_round(1, 1, 2, 4);
  EXPECT_EQ(a.source, 0);
  EXPECT_EQ(a.q_len, 4);
  EXPECT_EQ(a.kv_len, 2);
  // Rank 0, round 1 reads rank 1's K / V: its tail chunk against all of them.
  const CpRound b = cp_round(1, 0, 2, 4);
  EXPECT_EQ(b.source, 1);
  EXPECT_EQ(b.q_begin, 2);
  EXPECT_EQ(b.q_len, 2);
  EXPECT_EQ(b.kv_len, 4);
  EXPECT_TRUE(b.partial);
}

}  // namespace
}  // namespace fullshard
