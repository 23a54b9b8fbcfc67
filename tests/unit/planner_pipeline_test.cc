// The planner's pipeline-parallel knob (NOTE [Pipeline candidates] in search_space.cc): pp
// candidates put a leading pp dim on the mesh, run their accumulation steps as the pipeline's
// microbatches, keep torchtitan's two pp reshard policies without CPU offload, and the scenario
// file written for one parses back to the same pipeline.
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "simulator/planner/candidate_json.h"
#include "simulator/planner/planner.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

json base_json() {
  return {{"model", {{"name", "tiny-llama"}, {"n_layers", 4}}},
          {"training", {{"seq_len", 32}, {"steps", 2}}},
          {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 4}}}};
}

PlanOptions options(std::vector<int> pp) {
  PlanOptions o;
  o.base = parse_scenario(base_json());
  o.space.gpus = 4;
  o.space.gpus_per_node = 4;
  o.space.n_layers = o.base.model.n_layers;
  o.space.global_batch = 8;
  o.space.pp_degrees = std::move(pp);
  o.threads = 2;
  return o;
}

TEST(PlannerPipeline, CandidatesRunTheirAccumulationAsMicrobatches) {
  const PlanOptions o = options({1, 2, 4});
  const PlanResult r = plan(o);
  ASSERT_TRUE(r.best_fits());
  std::map<int, int> per_pp;
  std::map<PipelineScheduleKind, int> per_schedule;
  for (const ConfigResult& c : r.configs) {
    const Candidate& k = c.candidate;
    ++per_pp[k.pp];
    EXPECT_EQ(k.pp * k.replicate * k.shard * k.tp, 4) << candidate_text(k);
    if (k.pp == 1) continue;
    ++per_schedule[k.pp_schedule];
    EXPECT_FALSE(k.cpu_offload) << candidate_text(k);
    EXPECT_TRUE(k.reshard.kind == ReshardAfterForward::Kind::kTrue ||
                k.reshard.kind == ReshardAfterForward::Kind::kFalse)
        << candidate_text(k);
    const Scenario s = candidate_scenario(o.base, k);
    ASSERT_TRUE(s.pipeline.enabled()) << candidate_text(k);
    EXPECT_EQ(s.pipeline.degree, k.pp);
    EXPECT_EQ(s.pipeline.schedule, k.pp_schedule);
    EXPECT_EQ(s.pipeline.microbatches, k.grad_accum);
    EXPECT_EQ(s.training.grad_accum_steps, 1);
    EXPECT_EQ(s.fsdp.mesh_dim_names.front(), "pp");
    // Every pp rank's batch: the global batch over the data-parallel ranks.
    EXPECT_EQ(s.training.batch_per_rank * (4 / (k.pp * k.tp)), 8) << candidate_text(k);
    EXPECT_NE(candidate_text(k).find("microbatches"), std::string::npos);
    EXPECT_EQ(candidate_settings_json(k)["pp"], k.pp);
    // The written scenario is the same pipeline.
    const Scenario back = parse_scenario(candidate_scenario_json(base_json(), k, "w", ""));
    EXPECT_EQ(back.pipeline.degree, k.pp) << candidate_text(k);
    EXPECT_EQ(back.pipeline.schedule, k.pp_schedule);
    EXPECT_EQ(back.pipeline.microbatches, s.pipeline.microbatches);
    EXPECT_EQ(back.pipeline.stages.size(), s.pipeline.stages.size());
    EXPECT_EQ(back.fsdp.mesh_shape, s.fsdp.mesh_shape);
    EXPECT_EQ(back.training.batch_per_rank, s.training.batch_per_rank);
    // Not bounded (NOTE [Pipeline candidates are not bounded]): simulated, never pruned.
    EXPECT_EQ(c.verdict, Verdict::kSimulated) << candidate_text(k);
  }
  EXPECT_GT(per_pp[1], 0);
  EXPECT_GT(per_pp[2], 0);
  EXPECT_GT(per_pp[4], 0);
  EXPECT_GT(per_schedule[PipelineScheduleKind::k1F1B], 0);
  EXPECT_GT(per_schedule[PipelineScheduleKind::kInterleaved1F1B], 0);
}

// 1F1B needs at least pp microbatches (PyTorch's constructor refuses fewer): such candidates are
// left out, not reported as failures.
TEST(PlannerPipeline, SchedulesTheMicrobatchesDoNotFitAreLeftOut) {
  PlanOptions o = options({2});
  o.space.global_batch = 4;  // 2 sequences per pipeline: 1F1B over 2 stages needs 2 microbatches
  o.space.pp_schedules = {PipelineScheduleKind::k1F1B};
  const PlanResult r = plan(o);
  bool pipelined = false;
  for (const ConfigResult& c : r.configs)
    if (c.candidate.pp == 2) {
      pipelined = true;
      EXPECT_GE(c.candidate.grad_accum, 2) << candidate_text(c.candidate);
    }
  EXPECT_TRUE(pipelined);
}

TEST(PlannerPipeline, RefusesAPipelineWithoutAGlobalBatch) {
  SpaceOptions s;
  s.gpus = 4;
  s.gpus_per_node = 4;
  s.pp_degrees = {1, 2};
  try {
    check_space_options(s);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "--pp");
    EXPECT_NE(std::string(e.what()).find("--global-batch"), std::string::npos) << e.what();
  }
  s.global_batch = 8;
  s.pp_degrees = {3};
  EXPECT_THROW(check_space_options(s), InputError);
  s.pp_degrees = {2};
  // The zero-bubble schedules run (NOTE [Lowered send and recv order]).
  s.pp_schedules = {PipelineScheduleKind::kZBVZeroBubble, PipelineScheduleKind::kDualPipeV,
                    PipelineScheduleKind::kInterleavedZeroBubble};
  EXPECT_NO_THROW(check_space_options(s));
}

}  // namespace
}  // namespace fullshard::planner
