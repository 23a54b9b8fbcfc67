// NOTE [Initialisation modes] (core/train/model_init.cc): the device memory of start-up under
// each training.init, against closed forms built from the model's parameters and the caching
// allocator's rounding (docs/simulator-reference.md, rule 1: a request rounds up to 512 B).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"
#include "simulator/simulate.h"

namespace fullshard::sim {
namespace {

using nlohmann::json;

uint64_t rounded(int64_t numel) {  // fp32 bytes as the caching allocator counts them
  const uint64_t b = static_cast<uint64_t>(numel) * 4;
  return b < 512 ? 512 : (b + 511) / 512 * 512;
}

json scenario(const std::string& init, int world) {
  return {{"model", "tiny-llama"},
          {"training", {{"batch_per_rank", 1}, {"seq_len", 16}, {"steps", 1}, {"init", init}}},
          {"fsdp", {{"mesh", {{"shape", {world}}}}}},
          {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", world}}}};
}

struct Expected {
  uint64_t meta = 0, broadcast = 0, device = 0;
};

// fully_shard order: each block, then the root (fsdp.units "blocks").
Expected closed_forms(const Scenario& s, int world) {
  Transformer model(s.model);
  uint64_t shards = 0, fulls = 0, largest_full = 0, first_unit_shards = 0;
  model.root().for_each_param([&](Param& p) {
    const uint64_t shard = rounded(padded_sharded_numel(p.shape, world));
    const uint64_t full = rounded(numel(p.shape));
    shards += shard;
    fulls += full;
    largest_full = std::max(largest_full, full);
  });
  model.blocks().front()->for_each_param(
      [&](Param& p) { first_unit_shards += rounded(padded_sharded_numel(p.shape, world)); });
  return {shards, shards + largest_full, fulls + first_unit_shards};
}

TEST(ModelInit, StartUpPeaksFollowTheClosedForms) {
  for (int world : {1, 2, 3}) {
    const Expected want = closed_forms(parse_scenario(scenario("meta", world)), world);
    for (const std::string init : {"meta", "device", "broadcast_from_rank0"}) {
      const SimulationReport r = simulate_scenario(parse_scenario(scenario(init, world)));
      ASSERT_TRUE(r.ok()) << init;
      const uint64_t expected = init == "meta"     ? want.meta
                                : init == "device" ? want.device
                                                   : want.broadcast;
      for (const auto& c : r.classes) {
        EXPECT_EQ(c.init_peak_allocated_bytes, expected) << init << " world " << world;
        EXPECT_GE(c.init_peak_reserved_bytes, c.init_peak_allocated_bytes);
        EXPECT_GE(c.peak_allocated_bytes, c.init_peak_allocated_bytes);
      }
      EXPECT_EQ(r.init, init == "meta" ? "" : init);
    }
  }
}

// The whole model in fp32 on every GPU before fully_shard: a 70B model cannot start on H100s,
// and the report says it ran out at start-up, not in a step; the meta-device init starts.
TEST(ModelInit, DeviceInitOfA70BModelRunsOutOfMemoryAtStartUp) {
  auto run = [](const std::string& init) {
    json j = {
        {"model", "llama3.1-70b"},
        {"training",
         {{"batch_per_rank", 1},
          {"seq_len", 1024},
          {"steps", 1},
          {"activation_checkpointing", "full"},
          {"init", init}}},
        {"fsdp",
         {{"mesh", {{"shape", {64}}}},
          {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}}},
        {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 8}, {"gpus_per_node", 8}}}};
    return simulate_scenario(parse_scenario(j));
  };
  const SimulationReport device = run("device");
  ASSERT_TRUE(device.out_of_memory);
  ASSERT_TRUE(device.classes.front().oom.has_value());
  EXPECT_EQ(device.classes.front().oom->step, -1);
  const SimulationReport meta = run("meta");
  EXPECT_FALSE(meta.out_of_memory);
}

TEST(ModelInit, RefusesWhatItCannotCopyRowsOf) {
  json offload = scenario("device", 2);
  offload["fsdp"]["cpu_offload"] = true;
  try {
    parse_scenario(offload);
    FAIL() << "cpu_offload with training.init device was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.init"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu_offload"), std::string::npos) << e.what();
  }
  json bad = scenario("gpu", 2);
  try {
    parse_scenario(bad);
    FAIL() << "training.init \"gpu\" was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.init"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fullshard::sim
