// The per-rank report shared by predicted and measured runs: its JSON objects and their
// inverse (how a measured rank report travels from a worker to the launcher).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/report/rank_report.h"

using namespace fullshard;

namespace {

RankReport random_report() {
  RankReport r;
  r.ranks = {*rc::gen::inRange(0, 64)};
  r.representative = r.ranks[0];
  r.peak_allocated_bytes = *rc::gen::inRange<uint64_t>(0, 1ull << 40);
  r.peak_reserved_bytes = r.peak_allocated_bytes + *rc::gen::inRange<uint64_t>(0, 1ull << 30);
  r.peak_host_bytes = *rc::gen::inRange<uint64_t>(0, 1ull << 30);
  r.peak_time_s = *rc::gen::inRange(0, 1000) / 8.0;
  for (auto& b : r.breakdown_at_peak) b = *rc::gen::inRange<uint64_t>(0, 1ull << 32);
  r.allocated_after_step =
      *rc::gen::container<std::vector<uint64_t>>(rc::gen::inRange<uint64_t>(0, 1ull << 40));
  r.allocator.num_segments = *rc::gen::inRange<uint64_t>(0, 100);
  r.allocator.num_alloc_retries = *rc::gen::inRange<uint64_t>(0, 5);
  r.compute_s = *rc::gen::inRange(0, 100) / 4.0;
  r.comm_s = *rc::gen::inRange(0, 100) / 4.0;
  r.busy_s[2] = 1.5;
  r.collectives_per_step[0] = *rc::gen::inRange(0, 50);
  if (*rc::gen::arbitrary<bool>()) {
    OutOfMemoryInfo o;
    o.requested_bytes = 123;
    o.what = "layers.0 all_gather output";
    o.category = "unsharded_params";
    o.capacity_bytes = 1ull << 34;
    o.step = 1;
    o.at_failure.allocated_bytes = 77;
    r.oom = o;
  }
  const std::vector<std::string> names = {"a", "layers.1 grad", "loss"};
  r.timeline_names = names;
  const int n = *rc::gen::inRange(0, 20);
  for (int i = 0; i < n; ++i) {
    TimelinePoint p;
    p.time_s = i * 0.25;
    p.allocated_bytes = static_cast<uint64_t>(*rc::gen::inRange(0, 1 << 30));
    p.reserved_bytes = p.allocated_bytes + 512;
    p.host_bytes = static_cast<uint64_t>(i);
    p.by_category[1] = p.allocated_bytes;
    p.what = *rc::gen::inRange(-1, 3);
    p.op = *rc::gen::inRange(-1, 3);
    p.is_alloc = *rc::gen::arbitrary<bool>();
    r.timeline.push_back(p);
  }
  return r;
}

}  // namespace

RC_GTEST_PROP(RankReport, JsonRoundTripIsExact, ()) {
  const RankReport r = random_report();
  const auto cls = rank_class_json(r);
  const auto tl = rank_timeline_json(r, 3);
  RC_ASSERT(tl.is_null() == r.timeline.empty());
  const RankReport back = rank_report_from_json(cls, tl);
  RC_ASSERT(rank_class_json(back) == cls);
  RC_ASSERT(rank_timeline_json(back, 3) == tl);
  RC_ASSERT(back.timeline.size() == r.timeline.size());
}

TEST(RankReport, MissingFieldIsAnInputErrorNamingIt) {
  RankReport r;
  r.ranks = {0};
  auto cls = rank_class_json(r);
  cls.erase("peak_reserved_bytes");
  try {
    rank_report_from_json(cls, nullptr);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("peak_reserved_bytes"), std::string::npos) << e.what();
  }
}
