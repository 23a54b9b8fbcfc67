// fsdp.ignored_params in the simulator (NOTE [Ignored parameters] in core/fsdp/ignored_param.h):
// an ignored parameter is whole on every rank and outside its unit's all-gather, to the byte.
#include <gtest/gtest.h>

#include <string>

#include "core/fsdp/shard_layout.h"
#include "simulator/engine/program.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using nlohmann::json;

namespace {

// tiny-llama on 2 ranks, bf16 compute / fp32 reduce, the output projection frozen in bf16 (its
// compute dtype) and maybe ignored by FSDP.
json head_json(bool ignored) {
  fullshard::testing::TinyOptions o;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = fullshard::testing::tiny_scenario_json(o);
  j["training"]["frozen"] = {"output.weight"};
  j["training"]["frozen_dtype"] = "bf16";
  if (ignored) j["fsdp"]["ignored_params"] = {"output.weight"};
  return j;
}

struct LastStep {
  std::vector<uint64_t> all_gather_bytes, reduce_scatter_bytes;  // the last step's, in order
  sim::SimulationReport report;
};

LastStep run(const json& j) {
  LastStep s;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs) {
      if (in.step != last || in.type != sim::InstrType::kCollective) continue;
      if (in.coll == CollectiveKind::kAllGather) s.all_gather_bytes.push_back(in.coll_bytes);
      if (in.coll == CollectiveKind::kReduceScatter)
        s.reduce_scatter_bytes.push_back(in.coll_bytes);
    }
  };
  s.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(s.report.ok()) << fullshard::testing::problems_text(s.report);
  return s;
}

uint64_t rounded(uint64_t bytes) { return (bytes + 511) / 512 * 512; }

}  // namespace

TEST(IgnoredParams, IgnoredOutputIsWholeOnEveryRankAndLeavesTheAllGather) {
  const LastStep managed = run(head_json(false));
  const LastStep ignored = run(head_json(true));
  const Shape out = {256, 64};  // tiny-llama's output.weight [vocab, dim], bf16
  const uint64_t shard = static_cast<uint64_t>(padded_sharded_numel(out, 2)) * 2;
  // The root's all-gather (the first of the step) no longer carries it: its bf16 shard from
  // each of the 2 ranks; the blocks' all-gathers and every reduce-scatter are unchanged (it is
  // frozen: no gradient either way).
  ASSERT_EQ(ignored.all_gather_bytes.size(), managed.all_gather_bytes.size());
  EXPECT_EQ(managed.all_gather_bytes[0] - ignored.all_gather_bytes[0], 2 * shard);
  for (size_t i = 1; i < managed.all_gather_bytes.size(); ++i)
    EXPECT_EQ(ignored.all_gather_bytes[i], managed.all_gather_bytes[i]);
  EXPECT_EQ(ignored.reduce_scatter_bytes, managed.reduce_scatter_bytes);
  // Between steps every rank holds the whole tensor instead of its shard (a block each).
  ASSERT_EQ(ignored.report.classes.size(), managed.report.classes.size());
  for (size_t c = 0; c < managed.report.classes.size(); ++c)
    EXPECT_EQ(ignored.report.classes[c].end_allocated_bytes -
                  managed.report.classes[c].end_allocated_bytes,
              rounded(static_cast<uint64_t>(numel(out)) * 2) - rounded(shard));
}

TEST(IgnoredParams, EveryInitModeLeavesTheSameMemory) {
  // The ignored tensor allocated in place (meta), kept from the model built on the device, or
  // filled from rank 0's broadcast (whose full tensors go at the end): the same bytes after.
  std::vector<uint64_t> end;
  for (const char* init : {"meta", "device", "broadcast_from_rank0"}) {
    json j = head_json(true);
    j["training"]["init"] = init;
    end.push_back(run(j).report.classes.front().end_allocated_bytes);
  }
  EXPECT_EQ(end[1], end[0]);
  EXPECT_EQ(end[2], end[0]);
}

TEST(IgnoredParams, BadInputsNameTheField) {
  using fullshard::testing::input_error_of;
  auto error = [](const json& j) { return input_error_of([&] { parse_scenario(j); }); };
  json j = head_json(true);
  j["fsdp"]["ignored_params"] = {"output.weight", "nothing.*"};
  EXPECT_NE(error(j).find("fsdp.ignored_params[1]"), std::string::npos) << error(j);
  j = head_json(true);
  j["fsdp"]["ignored_params"] = {"*"};
  j["training"]["frozen"] = {"*"};
  EXPECT_NE(error(j).find("ignores every parameter"), std::string::npos) << error(j);
  j = head_json(true);
  j["fsdp"]["ignored_params"] = {"output.weight", "norm.weight"};  // norm.weight trains
  EXPECT_NE(error(j).find("a trainable parameter"), std::string::npos) << error(j);
  j = head_json(true);
  j["training"]["frozen_dtype"] = "fp32";  // the root computes in bf16
  EXPECT_NE(error(j).find("F.linear refuses mixed dtypes"), std::string::npos) << error(j);
  j = head_json(true);
  j["fsdp"]["mesh"] = {{"shape", {1, 2}}, {"dim_names", {"shard", "tp"}}};
  j["hardware"]["gpus_per_node"] = 2;
  EXPECT_NE(error(j).find("fsdp.ignored_params: is set with a tp mesh dim"), std::string::npos)
      << error(j);
}
