// Pipeline schedules against PyTorch's own (tests/data/oracle/pipeline_schedules.json, written by
// tools/oracle/pipeline_schedules.py from torch 2.11's schedules.py), and what an order costs.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/pipeline/pipeline_schedule.h"
#include "core/pipeline/pipeline_timeline.h"

namespace fullshard {
namespace {

PipelineScheduleOptions options(PipelineScheduleKind kind, int pp, int per_rank, int m) {
  PipelineScheduleOptions o;
  o.kind = kind;
  o.pp_size = pp;
  o.stages_per_rank = per_rank;
  o.microbatches = m;
  return o;
}

TEST(PipelineSchedule, EveryRankRunsWhatPyTorchRuns) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) +
                   "/tests/data/oracle/pipeline_schedules.json");
  ASSERT_TRUE(in) << "missing tests/data/oracle/pipeline_schedules.json";
  const auto doc = nlohmann::json::parse(in);
  int compared = 0, refused = 0;
  for (const auto& c : doc.at("cases")) {
    const auto o = options(parse_pipeline_schedule(c.at("schedule").get<std::string>(), "case"),
                           c.at("pp"), c.at("stages_per_rank"), c.at("microbatches"));
    const std::string label = c.dump();
    if (c.contains("error")) {
      EXPECT_THROW(build_pipeline_order(o), InputError) << label;
      ++refused;
      continue;
    }
    const PipelineOrder order = build_pipeline_order(o);
    ASSERT_EQ(order.size(), c.at("ranks").size()) << label;
    for (size_t r = 0; r < order.size(); ++r)
      EXPECT_EQ(format_pipeline_actions(order[r]), c.at("ranks")[r].get<std::string>())
          << label << " rank " << r;
    ++compared;
  }
  EXPECT_GT(compared, 600);  // the grid: 7 schedules x pp {1,2,3,4,8} x microbatches x stages
  EXPECT_GT(refused, 50);
}

TEST(PipelineSchedule, NamesParseAsTorchtitanWritesThem) {
  EXPECT_EQ(parse_pipeline_schedule("interleaved1f1b", "x"),
            PipelineScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(parse_pipeline_schedule("ZBVZeroBubble", "x"), PipelineScheduleKind::kZBVZeroBubble);
  try {
    parse_pipeline_schedule("1F2B", "parallelism.pipeline_parallel_schedule");
    FAIL() << "1F2B parsed";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "parallelism.pipeline_parallel_schedule");
    EXPECT_NE(std::string(e.what()).find("DualPipeV"), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, RefusalsNameTheField) {
  auto where = [](const PipelineScheduleOptions& o) {
    try {
      check_pipeline_schedule(o);
    } catch (const InputError& e) {
      return e.where();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(where(options(PipelineScheduleKind::k1F1B, 4, 1, 3)), "pipeline.microbatches");
  EXPECT_EQ(where(options(PipelineScheduleKind::kGPipe, 4, 2, 8)), "pipeline.stages_per_rank");
  EXPECT_EQ(where(options(PipelineScheduleKind::kZBVZeroBubble, 4, 3, 8)),
            "pipeline.stages_per_rank");
  EXPECT_EQ(where(options(PipelineScheduleKind::kDualPipeV, 4, 2, 7)), "pipeline.microbatches");
  EXPECT_EQ(where(options(PipelineScheduleKind::kInterleaved1F1B, 4, 2, 10)), "accepted");
  EXPECT_EQ(where(options(PipelineScheduleKind::kInterleaved1F1B, 4, 2, 9)),
            "pipeline.microbatches");
  EXPECT_EQ(where(options(PipelineScheduleKind::kLoopedBFS, 0, 2, 9)), "pipeline.pp");
}

TEST(PipelineSchedule, PlacementIsLoopedOrV) {
  const auto looped = options(PipelineScheduleKind::kInterleaved1F1B, 4, 3, 8);
  EXPECT_EQ(pipeline_rank_stages(looped, 1), (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(pipeline_stage_rank(looped, 9), 1);
  const auto v = options(PipelineScheduleKind::kZBVZeroBubble, 4, 2, 8);
  EXPECT_EQ(pipeline_rank_stages(v, 1), (std::vector<int>{1, 6}));
  EXPECT_EQ(pipeline_stage_rank(v, 6), 1);
  EXPECT_EQ(pipeline_stage_rank(v, 7), 0);
}

// GPipe and 1F1B idle (pp - 1) / (m + pp - 1) of the time with uniform stages: the textbook
// bubble. 1F1B holds at most pp - r microbatches on rank r where GPipe holds all m.
TEST(PipelineTimeline, GPipeAnd1F1BHaveTheTextbookBubble) {
  for (int pp : {1, 2, 4, 8})
    for (int m : {8, 12, 32}) {
      for (auto kind : {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B}) {
        const auto o = options(kind, pp, 1, m);
        const PipelineOrder order = build_pipeline_order(o);
        const PipelineTimeline t = play_pipeline_order(o, order, PipelineDurations{1.0, 1.0, 1.0});
        EXPECT_DOUBLE_EQ(t.makespan, 3.0 * (m + pp - 1)) << pipeline_schedule_name(kind) << pp << m;
        EXPECT_NEAR(t.bubble_fraction(), double(pp - 1) / (m + pp - 1), 1e-12);
        const std::vector<int> peak = peak_in_flight_microbatches(order);
        for (int r = 0; r < pp; ++r)
          EXPECT_EQ(peak[r], kind == PipelineScheduleKind::kGPipe ? m : std::min(m, pp - r));
      }
    }
}

// Interleaving v stages per rank, each 1/v of the layers, shrinks the bubble (Narayanan et al.
// 2021: by about v); crossing ranks costs p2p time per hop.
TEST(PipelineTimeline, InterleavingShrinksTheBubble) {
  const int pp = 4, m = 8;
  const auto flat = options(PipelineScheduleKind::k1F1B, pp, 1, m);
  const double flat_bubble =
      play_pipeline_order(flat, build_pipeline_order(flat), {1.0, 1.0, 1.0}).bubble_fraction();
  for (int v : {2, 4}) {
    const auto o = options(PipelineScheduleKind::kInterleaved1F1B, pp, v, m);
    const PipelineDurations d{1.0 / v, 1.0 / v, 1.0 / v};
    const double bubble = play_pipeline_order(o, build_pipeline_order(o), d).bubble_fraction();
    EXPECT_LT(bubble, flat_bubble) << v;
  }
  const double slow =
      play_pipeline_order(flat, build_pipeline_order(flat), {1.0, 1.0, 1.0, 0.5}).makespan;
  // Microbatch 0's activation crosses pp - 1 hops forward and its gradient pp - 1 back.
  EXPECT_GE(slow, 3.0 * (m + pp - 1) + 2 * (pp - 1) * 0.5);
}

TEST(PipelineTimeline, AnOrderThatDeadlocksIsRefused) {
  const auto o = options(PipelineScheduleKind::kGPipe, 2, 1, 1);
  PipelineOrder order = build_pipeline_order(o);
  // Rank 0 waits for stage 1's gradient before it sends stage 1 its forward input.
  std::swap(order[0][0], order[0][1]);
  EXPECT_NE(check_pipeline_order(o, order), "");
  order = {{{0, PipelineOp::kForward, 0}, {0, PipelineOp::kFullBackward, 0}},
           {{1, PipelineOp::kForward, 0}, {1, PipelineOp::kFullBackward, 0}}};
  EXPECT_EQ(check_pipeline_order(o, order), "");
  EXPECT_NO_THROW(play_pipeline_order(o, order, {}));
  PipelineScheduleOptions two = options(PipelineScheduleKind::kGPipe, 2, 1, 2);
  order = {{{0, PipelineOp::kForward, 1},
            {0, PipelineOp::kForward, 0},
            {0, PipelineOp::kFullBackward, 0},
            {0, PipelineOp::kFullBackward, 1}},
           {{1, PipelineOp::kForward, 0},
            {1, PipelineOp::kFullBackward, 0},
            {1, PipelineOp::kForward, 1},
            {1, PipelineOp::kFullBackward, 1}}};
  EXPECT_EQ(check_pipeline_order(two, order), "");
  EXPECT_NO_THROW(play_pipeline_order(two, order, {}));
  // Rank 1 insists on microbatch 1 first while rank 0 sends 0 first and waits for its gradient.
  order[0] = {{0, PipelineOp::kForward, 0},
              {0, PipelineOp::kFullBackward, 0},
              {0, PipelineOp::kForward, 1},
              {0, PipelineOp::kFullBackward, 1}};
  order[1] = {{1, PipelineOp::kForward, 1},
              {1, PipelineOp::kFullBackward, 1},
              {1, PipelineOp::kForward, 0},
              {1, PipelineOp::kFullBackward, 0}};
  try {
    play_pipeline_order(two, order, {});
    FAIL() << "a deadlocking order played";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks: rank 0 at 0B0, rank 1 at 1F1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fullshard
