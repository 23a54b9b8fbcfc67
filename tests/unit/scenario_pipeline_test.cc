// The pipeline_parallel section and the pp mesh dim: what a scenario resolves to (stages and
// microbatches, as torchtitan's pipeline_llm builds them) and every refusal naming its field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"
#include "tests/support/input_error.h"

using namespace fullshard;
using fullshard::testing::input_error_of;
using nlohmann::json;

namespace {

json pp_scenario() {
  return json::parse(R"({
    "model": "tiny-llama",
    "training": {"batch_per_rank": 8, "seq_len": 64, "steps": 2},
    "fsdp": {"mesh": {"shape": [2, 2], "dim_names": ["pp", "dp_shard"]}},
    "pipeline_parallel": {"schedule": "1F1B", "microbatch_size": 2},
    "hardware": {"profile": "h100", "nodes": 1, "gpus_per_node": 4}
  })");
}

std::string error_of(const json& j) {
  return input_error_of([&] { parse_scenario(j); });
}

}  // namespace

TEST(PipelineScenario, ResolvesStagesAndMicrobatches) {
  const Scenario s = parse_scenario(pp_scenario());
  ASSERT_TRUE(s.pipeline.enabled());
  EXPECT_EQ(s.pipeline.degree, 2);
  EXPECT_EQ(s.pipeline.microbatches, 4);  // batch_per_rank 8 / microbatch_size 2
  EXPECT_EQ(s.pipeline.stages_per_rank, 1);
  ASSERT_EQ(s.pipeline.stages.size(), 2u);
  // torchtitan's split of 2 layers + embedding + output weights over 2 stages.
  EXPECT_EQ(format_stage_split(s.pipeline.stages), "e0-1 1-2o");
  EXPECT_EQ(s.fsdp.mesh_size("pp"), 2);
  EXPECT_EQ(s.fsdp.mesh_size("shard"), 2);
}

TEST(PipelineScenario, DefaultsAndMultiStageSchedules) {
  json j = pp_scenario();
  j.erase("pipeline_parallel");  // a pp dim alone: torchtitan's 1F1B, microbatch size 1
  Scenario s = parse_scenario(j);
  EXPECT_EQ(s.pipeline.schedule, PipelineScheduleKind::k1F1B);
  EXPECT_EQ(s.pipeline.microbatches, 8);
  j["pipeline_parallel"] = {{"schedule", "interleaved1f1b"}, {"microbatch_size", 4}};
  s = parse_scenario(j);
  EXPECT_EQ(s.pipeline.stages_per_rank, 2);  // torchtitan's 2 stages per rank
  EXPECT_EQ(s.pipeline.stages.size(), 4u);
  EXPECT_EQ(s.pipeline.microbatches, 2);
  j["pipeline_parallel"] = {{"schedule", "LoopedBFS"},
                            {"module_fqns_per_model_part",
                             {{"tok_embeddings"}, {"layers.0"}, {"layers.1"}, {"norm", "output"}}}};
  s = parse_scenario(j);
  EXPECT_EQ(format_stage_split(s.pipeline.stages), "e0-0 0-1 1-2 0-0o");
}

TEST(PipelineScenario, FourDimMesh) {
  json j = pp_scenario();
  j["hardware"]["gpus_per_node"] = 8;
  j["fsdp"]["mesh"] = {{"shape", {2, 1, 2, 2}},
                       {"dim_names", {"pp", "dp_replicate", "dp_shard", "tp"}}};
  const Scenario s = parse_scenario(j);
  EXPECT_EQ(s.fsdp.mesh_size("pp"), 2);
  EXPECT_EQ(s.fsdp.mesh_size("tp"), 2);
  j["fsdp"]["mesh"].erase("dim_names");
  EXPECT_NE(error_of(j).find("fsdp.mesh.shape: is [2,1,2,2], a 4-D mesh"), std::string::npos)
      << error_of(j);
  j["fsdp"]["mesh"]["dim_names"] = {"dp_shard", "pp", "dp_replicate", "tp"};  // pp not outermost
  EXPECT_NE(error_of(j).find("fsdp.mesh.dim_names"), std::string::npos) << error_of(j);
}

TEST(PipelineScenario, RefusalsNameTheField) {
  const auto refused = [](const std::function<void(json&)>& edit, const std::string& field) {
    json j = pp_scenario();
    edit(j);
    const std::string e = error_of(j);
    EXPECT_EQ(e.rfind(field + ":", 0), 0u) << "want " << field << ", got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  refused([](json& j) { j["fsdp"]["mesh"] = {{"shape", {4}}}; }, "pipeline_parallel");
  refused([](json& j) { j["pipeline_parallel"]["microbatch_size"] = 3; },
          "pipeline_parallel.microbatch_size");
  // The zero-bubble schedules run at any pp (NOTE [Lowered send and recv order] in
  // core/pipeline/pipeline_lowering.h) with the ops whose backward splits.
  for (const char* name : {"ZBVZeroBubble", "InterleavedZeroBubble", "DualPipeV"}) {
    json j = pp_scenario();
    j["pipeline_parallel"]["schedule"] = name;
    EXPECT_EQ(pipeline_schedule_name(parse_scenario(j).pipeline.schedule), std::string(name));
    j["model"] = {{"name", "tiny-llama"}, {"n_layers", 6}};
    j["pipeline_parallel"]["microbatch_size"] = 1;  // 8 microbatches: DualPipeV wants one per stage
    j["fsdp"]["mesh"] = {{"shape", {4, 2}}, {"dim_names", {"pp", "dp_shard"}}};
    j["hardware"]["gpus_per_node"] = 8;
    EXPECT_EQ(parse_scenario(j).pipeline.degree, 4) << name;
  }
  const auto dualpipev = [](json& j) {
    j["pipeline_parallel"]["schedule"] = "DualPipeV";
    j["training"]["batch_per_rank"] = 8;
  };
  refused(
      [&](json& j) {
        dualpipev(j);
        j["fsdp"]["mesh"] = {{"shape", {2, 1, 2}}, {"dim_names", {"pp", "dp_shard", "tp"}}};
        j["hardware"]["gpus_per_node"] = 4;
      },
      "fsdp.mesh.dim_names");
  // Blocks checkpointed whole split (NOTE [Split backward of a checkpointed block] in
  // core/model/autograd.cc); op-level SAC, whose cache W's recompute would find spent, does not.
  for (const json ac : {json("full"), json{{"mode", "selective_layer"}, {"every", 2}}}) {
    json j = pp_scenario();
    dualpipev(j);
    j["training"]["activation_checkpointing"] = ac;
    EXPECT_NE(parse_scenario(j).training.activation_checkpointing.mode, RecomputeMode::kNone);
  }
  refused(
      [&](json& j) {
        dualpipev(j);
        j["training"]["activation_checkpointing"] = "selective_op";
      },
      "training.activation_checkpointing");
  refused(
      [&](json& j) {
        dualpipev(j);
        j["model"] = {{"name", "tiny-llama"}, {"implementation", {{"compile", true}}}};
      },
      "model.implementation.compile");
  refused([](json& j) { j["pipeline_parallel"]["schedule"] = "Zigzag"; },
          "pipeline_parallel.schedule");
  refused([](json& j) { j["pipeline_parallel"]["stages"] = 2; }, "pipeline_parallel.stages");
  refused([](json& j) { j["training"]["grad_accum_steps"] = 2; }, "training.grad_accum_steps");
  refused([](json& j) { j["model"] = "tiny-gpt2"; }, "model");
  refused([](json& j) { j["pipeline_parallel"]["layers_per_stage"] = 5; },
          "pipeline_parallel.layers_per_stage");
  // GPipe with more stages than ranks: PyTorch's single-stage schedules take one stage each.
  refused(
      [](json& j) {
        j["pipeline_parallel"] = {{"schedule", "GPipe"}, {"layers_per_stage", 1}};
      },
      "pipeline_parallel.layers_per_stage");
  refused(
      [](json& j) {
        j["pipeline_parallel"]["module_fqns_per_model_part"] = {{"tok_embeddings", "layers.1"},
                                                                {"layers.0", "norm", "output"}};
      },
      "pipeline_parallel.module_fqns_per_model_part[0][1]");
  refused(
      [](json& j) {
        j["pipeline_parallel"]["module_fqns_per_model_part"] =
            json::parse(R"([["tok_embeddings", "layers.0"], ["layers.1", "norm"]])");
      },
      "pipeline_parallel.module_fqns_per_model_part[1]");
  refused(
      [](json& j) {
        j["pipeline_parallel"]["module_fqns_per_model_part"] = {
            {"tok_embeddings"}, {"layers.0"}, {"layers.1", "norm", "output"}};
      },
      "pipeline_parallel.module_fqns_per_model_part");
  refused(
      [](json& j) {
        j["pipeline_parallel"]["schedule"] = "LoopedBFS";
        j["pipeline_parallel"]["module_fqns_per_model_part"] = json::parse(
            R"([["tok_embeddings", "layers.0"], [], ["layers.1"], ["norm", "output"]])");
      },
      "pipeline_parallel.module_fqns_per_model_part[1]");
}
