// NOTE [Pageable offload] (core/fsdp/collectives.cc): with CPUOffloadPolicy(pin_memory=False)
// every offloaded gradient's D2H copy is blocking, as FSDP2's foreach_reduce makes it, and runs
// at the pageable bandwidth. Memory is the same as pinned offload; the step is longer, and stays
// longer when the two bandwidths are equal (the host waits for each copy).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/simulate.h"

namespace fullshard::sim {
namespace {

using nlohmann::json;

SimulationReport run(json offload, double pageable_bandwidth = 0) {
  json j = {{"model", "tiny-llama"},
            {"training", {{"batch_per_rank", 2}, {"seq_len", 32}, {"steps", 2}}},
            {"fsdp", {{"mesh", {{"shape", {2}}}}, {"cpu_offload", offload}}},
            {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 2}}}};
  Scenario s = parse_scenario(j);
  if (pageable_bandwidth > 0) s.hardware.device.pageable_copy_bandwidth = pageable_bandwidth;
  const SimulationReport r = simulate_scenario(s);
  EXPECT_TRUE(r.ok());
  return r;
}

TEST(PageableOffload, SameMemoryLongerStep) {
  const SimulationReport pinned = run(true);
  const SimulationReport pageable = run({{"pin_memory", false}});
  ASSERT_EQ(pinned.classes.size(), pageable.classes.size());
  for (size_t i = 0; i < pinned.classes.size(); ++i) {
    EXPECT_EQ(pinned.classes[i].peak_allocated_bytes, pageable.classes[i].peak_allocated_bytes);
    EXPECT_EQ(pinned.classes[i].peak_reserved_bytes, pageable.classes[i].peak_reserved_bytes);
  }
  EXPECT_GT(pageable.step_time_s, pinned.step_time_s);
  // At the pinned bandwidth the copies cost the same: what is left is the host's waits.
  const double pinned_bw = parse_scenario({{"model", "tiny-llama"},
                                           {"training", {{"seq_len", 32}}},
                                           {"hardware", {{"profile", "h100-sxm-80gb"}}}})
                               .hardware.device.pinned_copy_bandwidth;
  const SimulationReport blocking = run({{"pin_memory", false}}, pinned_bw);
  EXPECT_GT(blocking.step_time_s, pinned.step_time_s);
}

}  // namespace
}  // namespace fullshard::sim
