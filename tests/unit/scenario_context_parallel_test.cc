// The cp mesh dim and the context_parallel section: what a scenario resolves to (torchtitan's
// ["pp", "dp_replicate", "dp_shard", "cp", "tp"] order, FSDP over dp_shard x cp) and every
// refusal naming its field in one line.
#include <gtest/gtest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"
#include "tests/support/input_error.h"

using namespace fullshard;
using fullshard::testing::input_error_of;
using nlohmann::json;

namespace {

json cp_scenario() {
  return json::parse(R"({
    "model": "tiny-llama",
    "training": {"batch_per_rank": 8, "seq_len": 64, "steps": 2},
    "fsdp": {"mesh": {"shape": [2, 2], "dim_names": ["dp_shard", "cp"]}},
    "context_parallel": {"rotate_method": "alltoall"},
    "hardware": {"profile": "h100", "nodes": 1, "gpus_per_node": 4}
  })");
}

std::string error_of(const json& j) {
  return input_error_of([&] { parse_scenario(j); });
}

void expect_refused(const std::function<void(json&)>& edit, const std::string& field) {
  json j = cp_scenario();
  edit(j);
  const std::string e = error_of(j);
  EXPECT_EQ(e.rfind(field + ":", 0), 0u) << "want " << field << ", got: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

}  // namespace

TEST(ContextParallelScenario, ResolvesTheCpDim) {
  const Scenario s = parse_scenario(cp_scenario());
  ASSERT_TRUE(s.context_parallel.enabled());
  EXPECT_EQ(s.context_parallel.degree, 2);
  EXPECT_EQ(s.context_parallel.rotate_method, CpRotateMethod::kAllToAll);
  EXPECT_EQ(s.fsdp.mesh_size("shard"), 2);
  EXPECT_EQ(s.fsdp.mesh_size("cp"), 2);
  EXPECT_EQ(s.fsdp.fsdp_shard_size(), 4);  // torchtitan's dp_shard_cp
  json j = cp_scenario();
  j.erase("context_parallel");  // a cp dim alone: torchtitan's default rotate method
  EXPECT_EQ(parse_scenario(j).context_parallel.rotate_method, CpRotateMethod::kAllGather);
  j["fsdp"]["mesh"] = {{"shape", {4}}};
  EXPECT_FALSE(parse_scenario(j).context_parallel.enabled());
}

TEST(ContextParallelScenario, FiveDimMeshInTorchtitansOrder) {
  json j = cp_scenario();
  j["hardware"]["gpus_per_node"] = 8;
  j["hardware"]["nodes"] = 2;
  j.erase("context_parallel");
  j["fsdp"]["mesh"] = {{"shape", {2, 1, 2, 2, 2}},
                       {"dim_names", {"pp", "dp_replicate", "dp_shard", "cp", "tp"}}};
  const Scenario s = parse_scenario(j);
  EXPECT_EQ(s.pipeline.degree, 2);
  EXPECT_EQ(s.context_parallel.degree, 2);
  EXPECT_EQ(s.fsdp.mesh_size("tp"), 2);
  EXPECT_EQ(s.fsdp.fsdp_shard_size(), 4);
  // Without names a 5-D mesh is refused as too many dims; cp elsewhere than after shard too.
  j["fsdp"]["mesh"].erase("dim_names");
  EXPECT_NE(error_of(j).find("fsdp.mesh.shape: is [2,1,2,2,2], a 5-D mesh"), std::string::npos)
      << error_of(j);
  j["fsdp"]["mesh"]["dim_names"] = {"pp", "dp_replicate", "cp", "dp_shard", "tp"};
  EXPECT_EQ(error_of(j).rfind("fsdp.mesh.dim_names:", 0), 0u) << error_of(j);
  j["fsdp"]["mesh"]["dim_names"] = {"pp", "dp_replicate", "dp_shard", "tp", "cp"};
  EXPECT_EQ(error_of(j).rfind("fsdp.mesh.dim_names:", 0), 0u) << error_of(j);
  j["fsdp"]["mesh"] = {{"shape", {2, 2, 2, 2, 2, 1}},
                       {"dim_names", {"pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"}}};
  EXPECT_EQ(error_of(j).rfind("fsdp.mesh.shape:", 0), 0u) << error_of(j);
}

TEST(ContextParallelScenario, RefusalsNameTheField) {
  expect_refused([](json& j) { j["fsdp"]["mesh"] = {{"shape", {4}}}; }, "context_parallel");
  expect_refused([](json& j) { j["context_parallel"]["rotate_method"] = "ring"; },
                 "context_parallel.rotate_method");
  expect_refused([](json& j) { j["context_parallel"]["cp_rotate_method"] = "allgather"; },
                 "context_parallel.cp_rotate_method");
  // 2 x cp must divide seq_len (torchtitan's seq_len_divisor), with tp: tp x 2 x cp.
  expect_refused([](json& j) { j["training"]["seq_len"] = 66; }, "training.seq_len");
  expect_refused(
      [](json& j) {
        j["hardware"]["gpus_per_node"] = 8;
        j["fsdp"]["mesh"] = {{"shape", {2, 2, 2}}, {"dim_names", {"dp_shard", "cp", "tp"}}};
        j["training"]["seq_len"] = 68;  // divisible by tp and by 2 x cp, not by tp x 2 x cp
      },
      "training.seq_len");
  expect_refused([](json& j) { j["model"] = "tiny-gpt2"; }, "fsdp.mesh.dim_names");
  expect_refused(
      [](json& j) {
        j["model"] = {{"name", "tiny-llama"}, {"implementation", {{"attention", "cudnn"}}}};
      },
      "model.implementation.attention");
  expect_refused(
      [](json& j) {
        j["training"]["rank_batch"] = {{{"rank", 1}, {"batch", 4}}};
      },
      "training.rank_batch");
  // An int reshard_after_forward divides the FSDP group (dp_shard x cp = 4), not the shard dim.
  json j = cp_scenario();
  j["fsdp"]["reshard_after_forward"] = 4;
  EXPECT_EQ(parse_scenario(j).fsdp.reshard_after_forward.n, 4);
  expect_refused([](json& j) { j["fsdp"]["reshard_after_forward"] = 3; },
                 "fsdp.reshard_after_forward");
  // The chunked loss splits this rank's tokens: batch x seq_len / cp = 8 x 32.
  j = cp_scenario();
  j["model"] = {{"name", "tiny-llama"},
                {"implementation", {{"loss", "chunked"}, {"loss_chunks", 256}}}};
  EXPECT_NO_THROW(parse_scenario(j));
  j["model"]["implementation"]["loss_chunks"] = 512;
  EXPECT_EQ(error_of(j).rfind("model.implementation.loss_chunks:", 0), 0u) << error_of(j);
}
