// NOTE [Shared recording] in simulator/play_record.cc: with every rank played, a rank's program
// copied from its class's first rank (groups remapped, allocations and accesses dropped)
// equals its own recording without those, and the reports agree.
#include <gtest/gtest.h>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

struct Captured {
  std::vector<sim::Program> programs;
  std::vector<sim::GroupInfo> groups;
  sim::SimulationReport report;
};

Captured run(const Scenario& s, bool record_every_rank) {
  Captured c;
  sim::SimulateOptions o;
  o.all_ranks = true;
  o.record_every_rank = record_every_rank;
  o.on_played = [&](const sim::PlayedRun& r) {
    c.programs = r.programs;
    c.groups = r.groups;
  };
  c.report = sim::simulate_scenario(s, o);
  return c;
}

bool is_memory(const sim::Instr& in) {
  return in.type == sim::InstrType::kAlloc || in.type == sim::InstrType::kFree;
}

// `a` shares recordings, `b` records every rank.
void expect_same_programs(const Captured& a, const Captured& b) {
  ASSERT_EQ(a.programs.size(), b.programs.size());
  int copies = 0;
  for (size_t p = 0; p < a.programs.size(); ++p) {
    const sim::Program &x = a.programs[p], &y = b.programs[p];
    SCOPED_TRACE("rank " + std::to_string(x.rank));
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.names, y.names);
    const bool copied = x.instrs.size() != y.instrs.size();
    copies += copied;
    std::vector<const sim::Instr*> want;
    for (const auto& in : y.instrs)
      if (!copied || !is_memory(in)) want.push_back(&in);
    ASSERT_EQ(x.instrs.size(), want.size());
    if (copied) {
      EXPECT_TRUE(x.accesses.empty());
    }
    for (size_t i = 0; i < x.instrs.size(); ++i) {
      const sim::Instr &u = x.instrs[i], &v = *want[i];
      EXPECT_TRUE(u.type == v.type && u.stream == v.stream && u.step == v.step &&
                  u.name == v.name && u.event == v.event && u.buffer == v.buffer &&
                  u.on_host == v.on_host && u.address == v.address && u.size == v.size &&
                  u.host_seq == v.host_seq && u.op == v.op && u.place == v.place &&
                  u.flops == v.flops && u.bytes == v.bytes && u.coll == v.coll &&
                  u.reduce == v.reduce && u.dtype == v.dtype && u.coll_bytes == v.coll_bytes)
          << "instruction " << i;
      if (!copied) {
        EXPECT_TRUE(u.access_begin == v.access_begin && u.access_count == v.access_count);
      }
      if (u.type == sim::InstrType::kCollective) {
        EXPECT_EQ(a.groups[u.group].ranks, b.groups[v.group].ranks) << "instruction " << i;
        EXPECT_EQ(a.groups[u.group].name, b.groups[v.group].name) << "instruction " << i;
      }
    }
  }
  EXPECT_GT(copies, 0);
  EXPECT_TRUE(a.report.ok());
  EXPECT_EQ(a.report.problems.size(), b.report.problems.size());
  EXPECT_EQ(a.report.step_time_s, b.report.step_time_s);
  EXPECT_EQ(a.report.exposed_comm_s, b.report.exposed_comm_s);
  EXPECT_EQ(a.report.last_step.critical_path_s, b.report.last_step.critical_path_s);
  EXPECT_EQ(a.report.events_processed, b.report.events_processed);
  ASSERT_EQ(a.report.classes.size(), b.report.classes.size());
  for (size_t c = 0; c < a.report.classes.size(); ++c) {
    const auto &u = a.report.classes[c], &v = b.report.classes[c];
    EXPECT_EQ(u.peak_allocated_bytes, v.peak_allocated_bytes);
    EXPECT_EQ(u.peak_reserved_bytes, v.peak_reserved_bytes);
    EXPECT_EQ(u.peak_host_bytes, v.peak_host_bytes);
    EXPECT_EQ(u.breakdown_at_peak, v.breakdown_at_peak);
    EXPECT_EQ(u.allocated_after_step, v.allocated_after_step);
    EXPECT_EQ(u.instructions, v.instructions);
    EXPECT_EQ(u.end_time_s, v.end_time_s);
    EXPECT_EQ(u.last_step_s, v.last_step_s);
    EXPECT_EQ(u.timeline.size(), v.timeline.size());
  }
}

TEST(SharedRecording, HsdpCopiesEqualRecordings) {
  testing::TinyOptions o;
  o.mesh = {2, 4};
  const Scenario s = testing::tiny_scenario(o);
  expect_same_programs(run(s, false), run(s, true));
}

TEST(SharedRecording, UnevenShardsAndOffload) {
  testing::TinyOptions o;
  o.mesh = {6};  // tiny-llama's rows do not divide by 6: several classes
  o.cpu_offload = true;
  const Scenario s = testing::tiny_scenario(o);
  EXPECT_GT(sim::rank_classes(s).size(), 1u);
  expect_same_programs(run(s, false), run(s, true));
}

}  // namespace
}  // namespace fullshard
