// A scenario's ranks per node against its profile's node (NOTE [Ranks per node]) and the two
// device totals of a profile (NOTE [Two device totals]).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/scenario/hardware_profile.h"
#include "core/scenario/scenario.h"

namespace fullshard {
namespace {

using nlohmann::json;

json scenario(const std::string& profile, int gpus_per_node) {
  return {{"model", "tiny-llama"},
          {"training", {{"seq_len", 16}}},
          {"hardware", {{"profile", profile}, {"nodes", 1}, {"gpus_per_node", gpus_per_node}}}};
}

RC_GTEST_PROP(RanksPerNode, MoreThanAGpuNodeHoldsIsAnErrorNamingBoth, ()) {
  const std::string name = *rc::gen::elementOf(std::vector<std::string>{
      "h100", "gh200", "h100-grand-teton", "gh200-144gb", "a100", "b200", "h200", "cpu"});
  const HardwareProfile p = load_hardware_profile(name);
  const int gpn = *rc::gen::inRange(1, 33);
  const bool over = p.compute_capability > 0 && gpn > p.gpus_per_node;
  try {
    check_gpus_per_node(p, gpn, "hardware.gpus_per_node");
    RC_ASSERT(!over);
  } catch (const InputError& e) {
    RC_ASSERT(over);
    const std::string what = e.what();
    RC_ASSERT(e.where() == "hardware.gpus_per_node");
    RC_ASSERT(what.find("is " + std::to_string(gpn) + ",") != std::string::npos);
    RC_ASSERT(what.find("node of " + std::to_string(p.gpus_per_node) + " GPUs") !=
              std::string::npos);
  }
}

TEST(RanksPerNode, ScenarioChecksTheOverride) {
  EXPECT_THROW(parse_scenario(scenario("h100", 16)), InputError);
  EXPECT_EQ(parse_scenario(scenario("h100", 4)).hardware.gpus_per_node, 4);
  EXPECT_EQ(parse_scenario(scenario("cpu", 4)).hardware.gpus_per_node,
            4);  // a host runs any number
  EXPECT_THROW(parse_scenario(scenario("gh200", 8)), InputError);
}

TEST(TwoDeviceTotals, EveryProfileFitsTheAllocatorInsideCudasTotal) {
  for (const auto& name : list_hardware_profiles()) {
    SCOPED_TRACE(name);
    const HardwareProfile p = load_hardware_profile(name);
    EXPECT_LE(p.cuda_total_memory_bytes, p.memory_bytes);
    EXPECT_LE(p.memory_bytes - p.non_allocator_bytes, p.cuda_total_memory_bytes);
  }
  // The H100 80GB: nvidia-smi 81559 MiB, torch 81089 MiB.
  const HardwareProfile h100 = load_hardware_profile("h100");
  EXPECT_EQ(h100.memory_bytes - h100.cuda_total_memory_bytes, uint64_t{470} << 20);
}

TEST(TwoDeviceTotals, AMemoryOverrideKeepsTheDriverReserve) {
  json j = scenario("h100", 8);
  j["hardware"]["memory_gib"] = 40;
  const Scenario s = parse_scenario(j);
  EXPECT_EQ(s.hardware.device.memory_bytes, uint64_t{40} << 30);
  EXPECT_EQ(s.hardware.device.memory_bytes - s.hardware.device.cuda_total_memory_bytes,
            uint64_t{470} << 20);
}

}  // namespace
}  // namespace fullshard
