// The measured step breakdown (NOTE [Measured step breakdown]) and the last_step JSON round trip.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/common/intervals.h"
#include "core/report/step_breakdown.h"

namespace fullshard {
namespace {

double part(const StepBreakdown& b, PathKind k) {
  return b.critical_path_s[static_cast<size_t>(k)];
}

StreamIntervals random_busy() {
  StreamIntervals iv;
  for (auto& v : iv) {
    const auto n = *rc::gen::inRange(0, 6);
    for (int i = 0; i < n; ++i) {
      const double a = *rc::gen::inRange(0, 1000) / 100.0, len = *rc::gen::inRange(0, 300) / 100.0;
      v.emplace_back(a, a + len);
    }
  }
  return iv;
}

// Brute force: the precedence rule sampled on a fine grid.
RC_GTEST_PROP(MeasuredStepBreakdown, PartsSumToTheWindowAndFollowThePrecedence, ()) {
  const StreamIntervals busy = random_busy();
  const double begin = *rc::gen::inRange(0, 500) / 100.0,
               end = begin + *rc::gen::inRange(0, 800) / 100.0;
  const StepBreakdown b = measured_step_breakdown(busy, begin, end);
  double sum = 0;
  for (double v : b.critical_path_s) {
    RC_ASSERT(v >= -1e-12);
    sum += v;
  }
  RC_ASSERT(std::abs(sum - (end - begin)) < 1e-9);
  RC_ASSERT(part(b, PathKind::kPeerWait) == 0.0);
  RC_ASSERT(part(b, PathKind::kCpu) == 0.0);
  const auto in = [&](StreamRole r, double t) {
    for (const auto& [s, e] : busy[static_cast<size_t>(r)])
      if (s <= t && t < e) return true;
    return false;
  };
  const int n = 4000;
  double want[kNumPathKinds] = {};
  const double dt = (end - begin) / n;
  for (int i = 0; i < n; ++i) {
    const double t = begin + (i + 0.5) * dt;
    PathKind k = PathKind::kLaunch;
    if (in(StreamRole::kDefault, t))
      k = PathKind::kCompute;
    else if (in(StreamRole::kAllGather, t) || in(StreamRole::kReduceScatter, t) ||
             in(StreamRole::kAllReduce, t) || in(StreamRole::kContextParallel, t))
      k = PathKind::kCommunication;
    else if (in(StreamRole::kAllGatherCopyIn, t))
      k = PathKind::kDeviceCopy;
    else if (in(StreamRole::kHostToDevice, t) || in(StreamRole::kDeviceToHost, t))
      k = PathKind::kHostLink;
    want[static_cast<int>(k)] += dt;
  }
  // Interval ends fall on a 0.01 grid; each boundary can misplace at most one sample.
  const double tolerance = 2 * 6 * kNumStreams * dt + 1e-9;
  for (int k = 0; k < kNumPathKinds; ++k)
    RC_ASSERT(std::abs(b.critical_path_s[k] - want[k]) <= tolerance);
  RC_ASSERT(std::abs(b.stream_busy_s[0] - part(b, PathKind::kCompute)) < 1e-9);
  RC_ASSERT(b.exposed_comm_s == part(b, PathKind::kCommunication));
}

TEST(MeasuredStepBreakdown, ClipsToTheWindow) {
  StreamIntervals busy;
  busy[static_cast<size_t>(StreamRole::kDefault)] = {{0, 2}, {3, 4}};
  busy[static_cast<size_t>(StreamRole::kAllGather)] = {{1.5, 3.5}};
  const StepBreakdown b = measured_step_breakdown(busy, 1, 5);
  EXPECT_DOUBLE_EQ(part(b, PathKind::kCompute), 2);        // [1, 2) and [3, 4)
  EXPECT_DOUBLE_EQ(part(b, PathKind::kCommunication), 1);  // [2, 3)
  EXPECT_DOUBLE_EQ(part(b, PathKind::kLaunch), 1);         // [4, 5)
  EXPECT_DOUBLE_EQ(b.comm_s, 2);
  EXPECT_DOUBLE_EQ(b.stream_busy_s[static_cast<size_t>(StreamRole::kAllGather)], 2);
}

// A collective on the compute stream (tensor parallelism's) is communication, not compute,
// and each collective's time goes to its group's mesh dim; exposed = not under a kernel.
TEST(MeasuredStepBreakdown, ComputeStreamCollectivesAreCommunicationByMeshDim) {
  StreamIntervals busy;
  auto& compute = busy[static_cast<size_t>(StreamRole::kDefault)];
  compute = {{0.0, 1.0}, {1.0, 1.5}, {2.0, 3.0}};  // kernel, tp all-gather, kernel
  busy[static_cast<size_t>(StreamRole::kAllGather)] = {{0.5, 2.5}};   // FSDP all-gather
  busy[static_cast<size_t>(StreamRole::kAllReduce)] = {{3.0, 3.25}};  // HSDP all-reduce
  const std::vector<CollectiveInterval> colls = {{"tp", StreamRole::kDefault, 1.0, 1.5},
                                                 {"shard", StreamRole::kAllGather, 0.5, 2.5},
                                                 {"replicate", StreamRole::kAllReduce, 3.0, 3.25}};
  const StepBreakdown b = measured_step_breakdown(busy, 0.0, 4.0, colls);
  const auto dim = [&](MeshDimKind k) { return b.comm_by_dim_s[static_cast<size_t>(k)]; };
  const auto exposed = [&](MeshDimKind k) {
    return b.exposed_comm_by_dim_s[static_cast<size_t>(k)];
  };
  EXPECT_DOUBLE_EQ(b.compute_s, 2.0);
  EXPECT_DOUBLE_EQ(b.stream_busy_s[static_cast<size_t>(StreamRole::kDefault)], 2.5);
  EXPECT_DOUBLE_EQ(b.comm_s, 2.25);          // [0.5, 2.5) and [3, 3.25)
  EXPECT_DOUBLE_EQ(b.exposed_comm_s, 1.25);  // [1, 2) and [3, 3.25)
  EXPECT_DOUBLE_EQ(dim(MeshDimKind::kTp), 0.5);
  EXPECT_DOUBLE_EQ(exposed(MeshDimKind::kTp), 0.5);
  EXPECT_DOUBLE_EQ(dim(MeshDimKind::kShard), 2.0);
  EXPECT_DOUBLE_EQ(exposed(MeshDimKind::kShard), 1.0);
  EXPECT_DOUBLE_EQ(dim(MeshDimKind::kReplicate), 0.25);
  EXPECT_DOUBLE_EQ(exposed(MeshDimKind::kReplicate), 0.25);
  // Without the collectives (a backend that does not report them) the tp all-gather is compute.
  EXPECT_DOUBLE_EQ(measured_step_breakdown(busy, 0.0, 4.0).compute_s, 2.5);
}

TEST(StepBreakdownJson, RoundTripsAndNamesAMissingField) {
  StreamIntervals busy;
  busy[static_cast<size_t>(StreamRole::kReduceScatter)] = {{0.25, 0.75}};
  busy[static_cast<size_t>(StreamRole::kHostToDevice)] = {{0.5, 1.0}};
  const StepBreakdown b = measured_step_breakdown(busy, 0, 1);
  const nlohmann::json j = step_breakdown_json(b, 3);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), 1.0);
  EXPECT_EQ(step_breakdown_json(step_breakdown_from_json(j), 3), j);
  nlohmann::json bad = j;
  bad["critical_path_s"].erase("host_link");
  try {
    step_breakdown_from_json(bad);
    ADD_FAILURE() << "accepted a report without host_link";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("last_step.critical_path_s.host_link"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fullshard
