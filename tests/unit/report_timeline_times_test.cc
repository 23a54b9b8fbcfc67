// NOTE [Measured timeline times] (core/report/timeline_times.h): a measured timeline point is
// placed at the start of the first work the host issued after it, never before its host time,
// non-decreasing.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "core/report/timeline_times.h"

using namespace fullshard;

TEST(TimelineStreamTimes, APointTakesTheStartOfTheNextIssuedWork) {
  // Host: alloc (seq 1), launch A (2), alloc (3), launch B (4), free (5), nothing after.
  // A starts at 1.0; B waits for A and starts at 3.0 although the host issued it at ~0.
  const std::vector<double> t =
      timeline_stream_times({1, 3, 5}, {0.1, 0.2, 0.3}, {{4, 3.0}, {2, 1.0}});
  EXPECT_EQ(t, (std::vector<double>{
                   1.0, 3.0, 3.0}));  // the free has no later work: its host time, raised to 3.0
  // A point whose next work started before a later point's host time keeps the order.
  EXPECT_EQ(timeline_stream_times({1, 3}, {0.5, 2.0}, {{2, 1.0}, {4, 2.5}}),
            (std::vector<double>{1.0, 2.5}));
  EXPECT_EQ(timeline_stream_times({1, 2}, {0.5, 0.7}, {}),
            (std::vector<double>{0.5, 0.7}));  // nothing measured
}

// Independently: for each point, the earliest start among works issued after it (a scan), then
// the running maximum with host times.
RC_GTEST_PROP(TimelineStreamTimes, MatchesAScanOfTheWorkIssuedAfterEachPoint, ()) {
  const int n = *rc::gen::inRange(0, 40);
  std::vector<uint64_t> seqs;
  std::vector<double> host;
  std::vector<std::pair<uint64_t, double>> work;
  uint64_t seq = 0;
  double clock = 0;
  for (int i = 0; i < n; ++i) {
    seq += 1;
    clock += *rc::gen::inRange(0, 10) * 0.1;
    if (*rc::gen::arbitrary<bool>()) {
      seqs.push_back(seq);
      host.push_back(clock);
    } else {
      work.emplace_back(seq, clock + *rc::gen::inRange(0, 50) * 0.1);  // a stream starts it later
    }
  }
  const std::vector<double> got = timeline_stream_times(seqs, host, work);
  RC_ASSERT(got.size() == seqs.size());
  double latest = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    double t = host[i];
    uint64_t next = UINT64_MAX;
    for (const auto& [s, start] : work)
      if (s > seqs[i] && s < next) next = s, t = std::max(host[i], start);
    latest = std::max(latest, t);
    RC_ASSERT(got[i] == latest);
    RC_ASSERT(got[i] >= host[i]);
  }
}
