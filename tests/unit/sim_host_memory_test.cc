// NOTE [Host memory per node] (simulator/host_memory.h): the pinned host bytes of a node's ranks
// against the profile's host_memory_bytes, in the report, its summary and its JSON.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "core/scenario/scenario.h"
#include "simulator/host_memory.h"
#include "simulator/report.h"
#include "simulator/simulate.h"

namespace fullshard {
namespace {

using nlohmann::json;

// Rank classes stand for every rank they list: the per-node sums equal summing rank by rank.
RC_GTEST_PROP(HostMemoryPerNode, SumsEveryRankOfTheFullestNode, ()) {
  const int gpus_per_node = *rc::gen::inRange(1, 9);
  const int world = gpus_per_node * *rc::gen::inRange(1, 5);
  const int n_classes = *rc::gen::inRange(1, world + 1);
  std::vector<RankReport> classes(static_cast<size_t>(n_classes));
  for (auto& c : classes) c.peak_host_bytes = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 40);
  std::vector<uint64_t> per_node(static_cast<size_t>(world / gpus_per_node), 0);
  for (int r = 0; r < world; ++r) {
    RankReport& c = classes[static_cast<size_t>(*rc::gen::inRange(0, n_classes))];
    c.ranks.push_back(r);
    per_node[static_cast<size_t>(r / gpus_per_node)] += c.peak_host_bytes;
  }
  const sim::HostMemoryPerNode h = sim::host_memory_per_node(classes, gpus_per_node);
  const uint64_t fullest = *std::max_element(per_node.begin(), per_node.end());
  RC_ASSERT(h.peak_bytes == fullest);
  if (fullest > 0) RC_ASSERT(per_node[static_cast<size_t>(h.node)] == fullest);
}

Scenario offload_scenario(std::optional<uint64_t> host_memory_bytes) {
  json hw = {{"profile", "h100-sxm-80gb"}, {"nodes", 2}, {"gpus_per_node", 2}};
  if (host_memory_bytes) hw["host_memory_bytes"] = *host_memory_bytes;
  return parse_scenario({{"model", "tiny-llama"},
                         {"training", {{"seq_len", 32}, {"steps", 2}, {"batch_per_rank", 1}}},
                         {"fsdp", {{"mesh", {{"shape", {4}}}}, {"cpu_offload", true}}},
                         {"hardware", hw}});
}

TEST(HostMemoryPerNode, OffloadIsCheckedAgainstTheNodesHostMemory) {
  const sim::SimulationReport roomy = sim::simulate_scenario(offload_scenario(std::nullopt));
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy.host_memory_bytes, uint64_t{2} << 40);  // the profile's 2 TiB
  // Two ranks a node: the fullest node holds its two ranks' offloaded state.
  uint64_t node0 = 0;
  for (const auto& c : roomy.classes)
    for (int r : c.ranks)
      if (r < 2) node0 += c.peak_host_bytes;
  ASSERT_GT(node0, 0u);
  EXPECT_GE(roomy.peak_host_bytes_per_node, node0);
  EXPECT_FALSE(roomy.host_out_of_memory);
  EXPECT_NE(sim::report_summary(roomy).find("host memory per node: "), std::string::npos);

  const uint64_t need = roomy.peak_host_bytes_per_node;
  const sim::SimulationReport exact = sim::simulate_scenario(offload_scenario(need));
  EXPECT_FALSE(exact.host_out_of_memory);
  EXPECT_TRUE(exact.ok());

  const sim::SimulationReport tight = sim::simulate_scenario(offload_scenario(need - 1));
  EXPECT_TRUE(tight.host_out_of_memory);
  EXPECT_FALSE(tight.ok());
  EXPECT_FALSE(tight.out_of_memory);  // the GPUs are fine
  EXPECT_NE(sim::report_summary(tight).find("HOST OUT OF MEMORY"), std::string::npos)
      << sim::report_summary(tight);
  const json j = sim::report_json(tight);
  EXPECT_EQ(j["host_out_of_memory"], true);
  EXPECT_EQ(j["host_memory_bytes"], need - 1);
  EXPECT_EQ(j["peak_host_bytes_per_node"], need);

  // 0: the node's host memory is not known, and nothing is checked.
  const sim::SimulationReport unknown = sim::simulate_scenario(offload_scenario(0));
  EXPECT_FALSE(unknown.host_out_of_memory);
  EXPECT_NE(sim::report_summary(unknown).find("not checked"), std::string::npos);
}

TEST(HostMemoryPerNode, NoOffloadPinsNothing) {
  Scenario s = offload_scenario(1);
  s.fsdp.cpu_offload = false;
  const sim::SimulationReport r = sim::simulate_scenario(s);
  EXPECT_EQ(r.peak_host_bytes_per_node, 0u);
  EXPECT_FALSE(r.host_out_of_memory);
  EXPECT_EQ(sim::report_summary(r).find("host memory"), std::string::npos);
}

}  // namespace
}  // namespace fullshard
