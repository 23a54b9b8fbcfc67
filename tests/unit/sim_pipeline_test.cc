// Pipeline parallelism in the simulator: each pp rank runs its stages' actions, sends and
// receives one activation and one gradient per microbatch and stage boundary, keeps FSDP2's
// gradients unsharded until the stage's last microbatch (one reduce-scatter per group and step),
// and holds the activations of the microbatches its schedule keeps in flight.
#include <gtest/gtest.h>

#include <functional>
#include <utility>
#include <vector>

#include "simulator/report.h"
#include "tests/support/pipeline_support.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;

TEST(SimPipeline, OneFOneBTransfersAndReductions) {
  PipelineCase c;  // tiny-llama, pp 2 x FSDP 2, 1F1B, 4 microbatches
  const Scenario s = parse_scenario(pipeline_scenario_json(c));
  const PipelineRun run = simulate_pipeline(s);
  ASSERT_TRUE(run.report.ok()) << problems_text(run.report);
  // Stage 0 sends 4 activations and receives 4 gradients; stage 1 the other way round.
  EXPECT_EQ(run.transfers[0], (std::map<std::string, int>{{"F send", 4}, {"B recv", 4}}));
  EXPECT_EQ(run.transfers[1], (std::map<std::string, int>{{"F recv", 4}, {"B send", 4}}));
  // FSDP units of stage 0: layers.0 and the root (tok_embeddings); of stage 1: layers.1 and the
  // root (norm, output). reshard_after_forward false and no reshard between microbatches: one
  // all-gather per unit and step; one reduce-scatter per unit after the last microbatch.
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(run.collectives[k].at(CollectiveKind::kAllGather), 2) << "pp rank " << k;
    EXPECT_EQ(run.collectives[k].at(CollectiveKind::kReduceScatter), 2) << "pp rank " << k;
  }
  // The transfers and the gradient norm's pp all-reduce count as the pp dim's communication.
  EXPECT_GT(run.report.last_step.comm_by_dim_s[static_cast<size_t>(MeshDimKind::kPp)], 0);
  ASSERT_TRUE(run.report.pipeline.has_value());
  EXPECT_EQ(run.report.pipeline->peak_in_flight, (std::vector<int>{2, 1}));
  // The tokens of one pipeline's batch count once over its pp ranks.
  EXPECT_DOUBLE_EQ(run.report.tokens_per_step, 4.0 * 32 * 2);  // 4 sequences x 2 dp ranks
}

TEST(SimPipeline, OneFOneBPeakBelowGPipe) {
  for (int pp : {2, 4}) {
    PipelineCase c;
    c.pp = pp;
    c.shard = 1;
    c.layers = 2 * pp;
    c.microbatches = 2 * pp;  // more microbatches than stages
    c.schedule = "GPipe";
    const PipelineRun gpipe = simulate_pipeline(parse_scenario(pipeline_scenario_json(c)));
    c.schedule = "1F1B";
    const PipelineRun one = simulate_pipeline(parse_scenario(pipeline_scenario_json(c)));
    ASSERT_TRUE(gpipe.report.ok()) << problems_text(gpipe.report);
    ASSERT_TRUE(one.report.ok()) << problems_text(one.report);
    for (int k = 0; k < pp; ++k)
      EXPECT_LT(one.peak[k], gpipe.peak[k]) << "pp " << pp << ", rank " << k;
  }
}

TEST(SimPipeline, PeakGrowsWithMicrobatchesInFlight) {
  // GPipe keeps every microbatch in flight: each one more raises every rank's peak.
  uint64_t before[2] = {0, 0};
  for (int m : {1, 2, 4}) {
    PipelineCase c;
    c.schedule = "GPipe";
    c.microbatches = m;
    const PipelineRun run = simulate_pipeline(parse_scenario(pipeline_scenario_json(c)));
    ASSERT_TRUE(run.report.ok()) << problems_text(run.report);
    for (int k = 0; k < 2; ++k) {
      EXPECT_GT(run.peak[k], before[k]) << m << " microbatches, rank " << k;
      before[k] = run.peak[k];
    }
  }
}

TEST(SimPipeline, InterleavedStages) {
  PipelineCase c;
  c.schedule = "Interleaved1F1B";
  c.layers = 4;
  const Scenario s = parse_scenario(pipeline_scenario_json(c));
  ASSERT_EQ(s.pipeline.stages_per_rank, 2);
  const PipelineRun run = simulate_pipeline(s);
  ASSERT_TRUE(run.report.ok()) << problems_text(run.report);
  // Rank 0 holds stages 0 and 2: it sends on 0->1 and 2->3, receives on 1->2.
  EXPECT_EQ(run.transfers[0], (std::map<std::string, int>{
                                  {"F send", 8}, {"F recv", 4}, {"B send", 4}, {"B recv", 8}}));
  EXPECT_NE(sim::report_summary(run.report).find("pipeline: Interleaved1F1B over pp 2"),
            std::string::npos);
}

TEST(SimPipeline, ComposesWithHsdpTpAndFsdpOptions) {
  // Each variant on the tiny pp scenario simulates cleanly, also with every rank recorded.
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> variants = {
      {"hsdp",
       [](nlohmann::json& j) {
         j["fsdp"]["mesh"] = {{"shape", {2, 2, 2}},
                              {"dim_names", {"pp", "dp_replicate", "dp_shard"}}};
         j["hardware"]["gpus_per_node"] = 8;
       }},
      {"tp",
       [](nlohmann::json& j) {
         j["fsdp"]["mesh"] = {{"shape", {2, 2, 2}}, {"dim_names", {"pp", "dp_shard", "tp"}}};
         j["hardware"]["gpus_per_node"] = 8;
       }},
      {"embed_blocks_head", [](nlohmann::json& j) { j["fsdp"]["units"] = "embed_blocks_head"; }},
      {"root unit", [](nlohmann::json& j) { j["fsdp"]["units"] = "root"; }},
      {"full AC", [](nlohmann::json& j) { j["training"]["activation_checkpointing"] = "full"; }},
      {"op SAC",
       [](nlohmann::json& j) { j["training"]["activation_checkpointing"] = "selective_op"; }},
      {"cpu offload", [](nlohmann::json& j) { j["fsdp"]["cpu_offload"] = true; }},
      {"reshard after forward",
       [](nlohmann::json& j) { j["fsdp"]["reshard_after_forward"] = true; }},
  };
  for (const auto& [name, edit] : variants) {
    nlohmann::json j = pipeline_scenario_json(PipelineCase{});
    edit(j);
    const Scenario s = parse_scenario(j);
    EXPECT_TRUE(sim::simulate_scenario(s).ok()) << name;
    sim::SimulateOptions all;
    all.all_ranks = true;
    const sim::SimulationReport r = sim::simulate_scenario(s, all);
    EXPECT_TRUE(r.ok()) << name << " (every rank): " << problems_text(r);
  }
}
