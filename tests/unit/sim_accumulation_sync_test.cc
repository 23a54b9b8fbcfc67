// training.grad_sync_during_accumulation under HSDP: what each FSDP2 setting issues per step and
// what it costs. "none" (set_requires_gradient_sync(False)) keeps unsharded gradients and
// reduces once; "reduce_scatter" (set_requires_all_reduce(False), NOTE [Partial reduce without
// all-reduce] in core/fsdp/collectives.h) reduce-scatters every micro-batch and all-reduces the
// sum once; "all" reduce-scatters and all-reduces every micro-batch.
#include <gtest/gtest.h>

#include <map>

#include "core/common/error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;

namespace {

struct SyncRun {
  std::map<CollectiveKind, int> per_step;  // program 0's last step, every group
  sim::SimulationReport report;
};

SyncRun simulate(const std::string& sync, int accum) {
  TinyOptions o;
  o.model = "llama3.1-8b";
  o.mesh = {2, 4};  // HSDP: 2 replicas of 4 shards
  o.batch = 1;
  o.seq = 2048;
  o.grad_accum_steps = accum;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  o.hardware_extra = {{"profile", "h100-sxm-80gb"}, {"gpus_per_node", 8}};
  nlohmann::json j = tiny_scenario_json(o);
  j["training"]["grad_sync_during_accumulation"] = sync;
  SyncRun r;
  sim::SimulateOptions so;
  so.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs)
      if (in.type == sim::InstrType::kCollective && in.step == last) ++r.per_step[in.coll];
  };
  r.report = sim::simulate_scenario(parse_scenario(j), so);
  EXPECT_TRUE(r.report.ok()) << sync << ": " << problems_text(r.report);
  return r;
}

TEST(AccumulationSync, EachSettingIssuesWhatFsdp2Issues) {
  const int k = 4;
  const SyncRun none = simulate("none", k), rs = simulate("reduce_scatter", k),
                all = simulate("all", k);
  const SyncRun one = simulate("none", 1);
  const int groups = one.per_step.at(CollectiveKind::kReduceScatter);  // one RS per group
  ASSERT_GT(groups, 1);
  EXPECT_EQ(one.per_step.at(CollectiveKind::kAllReduce) >= groups, true);
  const int ar_other = one.per_step.at(CollectiveKind::kAllReduce) - groups;  // grad norm etc.
  EXPECT_EQ(none.per_step.at(CollectiveKind::kReduceScatter), groups);
  EXPECT_EQ(none.per_step.at(CollectiveKind::kAllReduce), groups + ar_other);
  EXPECT_EQ(rs.per_step.at(CollectiveKind::kReduceScatter), k * groups);
  EXPECT_EQ(rs.per_step.at(CollectiveKind::kAllReduce), groups + ar_other);
  EXPECT_EQ(all.per_step.at(CollectiveKind::kReduceScatter), k * groups);
  EXPECT_EQ(all.per_step.at(CollectiveKind::kAllReduce), k * groups + ar_other);
  // Memory: "none" holds every group's unsharded fp32 gradient across micro-batches; the
  // partial sums are a shard's. Time: "all" all-reduces k times what "reduce_scatter" does.
  EXPECT_LT(rs.report.classes.front().peak_allocated_bytes,
            none.report.classes.front().peak_allocated_bytes);
  EXPECT_GT(all.report.step_time_s, rs.report.step_time_s);
  EXPECT_GT(rs.report.step_time_s, none.report.step_time_s);
}

TEST(AccumulationSync, ReduceScatterOnlyNeedsAReplicateDim) {
  TinyOptions o;
  o.mesh = {4};
  o.grad_accum_steps = 2;
  nlohmann::json j = tiny_scenario_json(o);
  j["training"]["grad_sync_during_accumulation"] = "reduce_scatter";
  try {
    parse_scenario(j);
    FAIL() << "reduce_scatter accepted without HSDP";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "training.grad_sync_during_accumulation");
  }
  j["training"]["grad_sync_during_accumulation"] = "sometimes";
  EXPECT_THROW(parse_scenario(j), InputError);
  // HSDP with torchtitan's chunked loss: the output group's two reductions per backward.
  o.mesh = {2, 2};
  o.units = "embed_blocks_head";
  j = tiny_scenario_json(o);
  j["model"] = {{"name", "tiny-llama"}, {"implementation", {{"loss", "chunked"}}}};
  EXPECT_NO_THROW(parse_scenario(j));
  j["training"]["grad_sync_during_accumulation"] = "reduce_scatter";
  try {
    parse_scenario(j);
    FAIL() << "reduce_scatter accepted with the chunked loss";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "training.grad_sync_during_accumulation");
    EXPECT_NE(std::string(e.what()).find("chunked"), std::string::npos) << e.what();
  }
}

}  // namespace
