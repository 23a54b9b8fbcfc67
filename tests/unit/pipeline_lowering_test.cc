// Lowered pipeline schedules against PyTorch's own (tests/data/oracle/pipeline_lowered.json,
// written by tools/oracle/pipeline_lowered.py from torch 2.11's `_prepare_schedule_with_comms`),
// and the check that a lowered order runs with every send meeting its recv.
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/pipeline/pipeline_lowering.h"

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

// PyTorch's printed form of one lowered action back into a LoweredAction (no OVERLAP_F_B).
LoweredAction parse(const std::string& s) {
  static const std::regex re("(\\d+)([A-Z_]+?)(\\d*)");
  std::smatch m;
  EXPECT_TRUE(std::regex_match(s, m, re)) << s;
  LoweredAction a;
  const std::string what = m[2];
  const int stage = std::stoi(m[1]);
  const int mb = m[3].length() ? std::stoi(m[3]) : -1;
  if (what.size() == 1) {
    const PipelineOp op = what == "F"   ? PipelineOp::kForward
                          : what == "B" ? PipelineOp::kFullBackward
                          : what == "I" ? PipelineOp::kBackwardInput
                                        : PipelineOp::kBackwardWeight;
    a.compute.push_back(PipelineAction{stage, op, mb});
    return a;
  }
  for (LoweredKind k : {LoweredKind::kSendF, LoweredKind::kRecvF, LoweredKind::kSendB,
                        LoweredKind::kRecvB, LoweredKind::kUnshard, LoweredKind::kReshard,
                        LoweredKind::kReduceGrad})
    if (what == lowered_kind_name(k)) a.kind = k;
  a.stage = stage;
  a.microbatch = mb;
  return a;
}

LoweredOrder parse_order(const std::vector<std::string>& ranks) {
  LoweredOrder out;
  for (const std::string& r : ranks) {
    std::istringstream in(r);
    out.emplace_back();
    for (std::string w; in >> w;) out.back().push_back(parse(w));
  }
  return out;
}

TEST(PipelineLowering, EveryRankRunsWhatPyTorchsRuntimeRuns) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/oracle/pipeline_lowered.json");
  ASSERT_TRUE(in) << "missing tests/data/oracle/pipeline_lowered.json";
  const auto doc = nlohmann::json::parse(in);
  int compared = 0, sends = 0;
  for (const auto& c : doc.at("cases")) {
    const auto o = options(parse_pipeline_schedule(c.at("schedule").get<std::string>(), "case"),
                           c.at("pp"), c.at("stages_per_rank"), c.at("microbatches"));
    const std::string label = c.dump(-1).substr(0, 100);
    const LoweredOrder lowered = lower_pipeline_order(o, build_pipeline_order(o));
    ASSERT_EQ(lowered.size(), c.at("ranks").size()) << label;
    for (size_t r = 0; r < lowered.size(); ++r) {
      EXPECT_EQ(format_lowered_actions(lowered[r]), c.at("ranks")[r].get<std::string>())
          << label << " rank " << r;
      sends += static_cast<int>(std::count_if(lowered[r].begin(), lowered[r].end(), [](auto& a) {
        return a.kind == LoweredKind::kSendF || a.kind == LoweredKind::kSendB;
      }));
    }
    EXPECT_EQ(check_lowered_order(o, lowered), "") << label;
    ++compared;
  }
  EXPECT_GT(compared, 550);  // 5 schedules x pp {1,2,3,4,8} x stages per rank x microbatches
  EXPECT_GT(sends, 10000);
}

// The order this program's runtime used before lowering (each recv right before the action that
// reads it, each send right after the one that makes it) deadlocks when both ends must meet at
// once: Interleaved1F1B with one stage per rank (1F1B's order) over pp 2, 2 microbatches. Lowering the same compute order does not.
TEST(PipelineLowering, CheckFindsCrossingTransfers) {
  const auto o = options(PipelineScheduleKind::kInterleaved1F1B, 2, 1, 2);
  const LoweredOrder crossing = parse_order(
      {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
       "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"});
  EXPECT_EQ(check_lowered_order(o, crossing), "deadlock: rank 0 at 0SEND_F1, rank 1 at 1SEND_B0");
  const LoweredOrder early = parse_order(
      {"0F0 0SEND_F0 0F1 0SEND_F1 0B0 0RECV_B0 0RECV_B1 0B1",
       "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"});
  EXPECT_EQ(check_lowered_order(o, early),
            "rank 0 action 0B0: runs before its output gradient arrives");
  const LoweredOrder lowered = lower_pipeline_order(o, build_pipeline_order(o));
  EXPECT_EQ(check_lowered_order(o, lowered), "");
  EXPECT_EQ(format_lowered_actions(lowered[1]),
            "1UNSHARD 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1REDUCE_GRAD 1RESHARD");
}

}  // namespace
}  // namespace fullshard
