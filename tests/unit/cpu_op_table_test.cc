// The per-op table on a real CPU-backend run (NOTE [Per-op times] in core/report/key_averages.h)
// and the measured timeline's contract (NOTE [Measured timeline] in runner/rank_runner.cc), both
// through runner::run_rank, the code path every real backend (CPU, CUDA) shares:
//  - every step's table has the simulator's keys with the same call counts, measured seconds
//    that sum to more than 0 and at most the step's wall time, and predicted seconds equal to the
//    simulator's for each key;
//  - a backend created without a memory timeline (the CUDA backend's default, run_real's
//    CPU backends here) still gives the run's timeline, one time per event: the GPU run's
//    CudaBackend.StepTimesAreMeasuredByStream failed exactly here ("memory timeline and its
//    times disagree"), and so did this test before the runner turned the timeline on.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/report/key_averages.h"
#include "simulator/op_prediction.h"
#include "simulator/simulate.h"
#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

constexpr int kSteps = 2;

Scenario tiny() {
  Scenario s =
      load_scenario_file(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/tiny-llama-cpu2.json");
  s.training.steps = kSteps;
  return s;
}

// The simulator's launches of rank 0 per step and key, counted from its played program with the
// window the real run uses (from the step's first batch load to its "step end").
struct Predicted {
  std::vector<PredictedKeyTimes> seconds;
  std::vector<std::map<std::string, int64_t>> calls;
};

Predicted predict(const Scenario& s) {
  Predicted p;
  sim::SimulateOptions so;
  so.simulated_steps = 0;  // play every step
  so.on_played = [&](const sim::PlayedRun& run) {
    p.seconds = sim::predicted_key_times(run, 0);
    const sim::Program& prog = run.programs.at(0);
    bool active = false;
    for (const sim::Instr& in : prog.instrs) {
      if (in.type == sim::InstrType::kMarker && prog.names[in.name] == "step end") active = false;
      if (in.type != sim::InstrType::kKernel) continue;
      if (in.op == OpKind::kLoadBatch) active = true;
      if (!active) continue;
      if (p.calls.size() <= static_cast<size_t>(in.step))
        p.calls.resize(static_cast<size_t>(in.step) + 1);
      ++p.calls[static_cast<size_t>(in.step)]
               [key_id(op_key(prog.names[in.name]), op_kind_name(in.op))];
    }
  };
  const sim::SimulationReport r = sim::simulate_scenario(s, so);
  EXPECT_TRUE(r.ok());
  return p;
}

TEST(CpuOpTable, EveryStepHasTheSimulatorsKeysCallsAndPredictedTimes) {
  const Scenario s = tiny();
  const testing::RealRun real = testing::run_real(s, kSteps);
  const Predicted pred = predict(s);
  ASSERT_EQ(pred.seconds.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(pred.calls.size(), static_cast<size_t>(kSteps));
  for (const auto& r : real.ranks) {
    ASSERT_EQ(r.steps.size(), static_cast<size_t>(kSteps));
    for (const auto& m : r.steps) {
      SCOPED_TRACE("rank " + std::to_string(r.rank) + " step " + std::to_string(m.step));
      const auto k = static_cast<size_t>(m.step);
      ASSERT_FALSE(m.ops.empty());
      std::map<std::string, int64_t> calls;
      double measured = 0;
      for (const KeyAverage& row : m.ops) {
        EXPECT_GT(row.calls, 0) << row.key;
        EXPECT_GE(row.measured_s, 0.0) << row.key;
        calls[key_id(row.key, row.kind)] = row.calls;
        measured += row.measured_s;
      }
      // Rank 0's program stands for both ranks (same shards, same batch size).
      EXPECT_EQ(calls, pred.calls[k]);
      EXPECT_GT(measured, 0.0);
      EXPECT_LE(measured, m.seconds) << "kernels measured beyond the step's wall time";
      // The layer index is folded out: tiny-llama's 2 layers launch each per-layer op twice.
      EXPECT_EQ(calls.count(key_id("layers.attention.wq", op_kind_name(OpKind::kLinear))), 1u);
      EXPECT_EQ(calls[key_id("layers.attention.wq", op_kind_name(OpKind::kLinear))], 2);
      std::vector<KeyAverage> table = m.ops;
      attach_predictions(table, pred.seconds[k]);
      EXPECT_EQ(table.size(), m.ops.size()) << "a predicted key the run did not launch";
      double predicted = 0;
      for (const KeyAverage& row : table) {
        EXPECT_EQ(row.predicted_s, pred.seconds[k].at(key_id(row.key, row.kind))) << row.key;
        EXPECT_GE(row.predicted_s, 0.0)
            << row.key;  // tiny fills price at 0 (no bytes worth a launch)
        if (row.flops > 0) {
          EXPECT_GT(row.predicted_s, 0.0) << row.key;
        }
        predicted += row.predicted_s;
      }
      EXPECT_GT(predicted, 0.0);
    }
  }
}

TEST(CpuOpTable, AMeasuredTimelineNeedsNoTimelineFromTheBackend) {
  const Scenario s = tiny();
  runner::RankOptions ro;
  ro.timeline_points = 100000;  // every point
  // run_real creates its CPU backends with record_timeline = false, as the CUDA backend's
  // options default to.
  const testing::RealRun real = testing::run_real(s, kSteps, ro);
  for (const auto& r : real.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    const auto& tl = r.report.timeline;
    ASSERT_GT(tl.size(), 10u);
    for (size_t i = 1; i < tl.size(); ++i) EXPECT_GE(tl[i].time_s, tl[i - 1].time_s);
    // The timeline's highest point is the run's peak, as the allocator counted it.
    uint64_t highest = 0;
    for (const auto& p : tl) highest = std::max(highest, p.allocated_bytes);
    EXPECT_EQ(highest, r.report.peak_allocated_bytes);
  }
}

// Events before the run (a buffer the caller allocated and freed on a backend that records its
// timeline from the start) are not the run's: the timeline starts where the run does.
TEST(CpuOpTable, EventsBeforeTheRunAreNotInItsTimeline) {
  testing::TinyOptions t;
  t.mesh = {1};
  const Scenario s = testing::tiny_scenario(t);
  cpu::CpuBackendOptions bo;
  bo.allocator = s.hardware.allocator;
  bo.batches = runner::batch_source(s);
  bo.record_timeline = true;
  const BatchSource batches = bo.batches;
  cpu::CpuBackend b(std::move(bo));
  b.free(b.allocate(1 << 20, MemCategory::kTemporary, StreamRole::kDefault, "before the run"));
  ASSERT_EQ(b.memory().timeline().size(), 2u);
  runner::RankOptions ro;
  ro.timeline_points = 100000;
  ro.batches = &batches;
  ro.steps = 1;
  const runner::RankResult r = runner::run_rank(b, s, ro);
  ASSERT_FALSE(r.report.timeline.empty());
  for (size_t i = 0; i < r.report.timeline_names.size(); ++i)
    EXPECT_NE(r.report.timeline_names[i], "before the run");
  EXPECT_EQ(r.steps.size(), 1u);
}

}  // namespace
}  // namespace fullshard
