// Every shipped scenario is a test: it parses, simulates without protocol problems or OOM,
// reaches a steady state, and (for small worlds) per-rank simulation agrees with rank classes.
#include <gtest/gtest.h>

#include <filesystem>

#include "simulator/report.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> shipped() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(fs::path(FULLSHARD_SOURCE_DIR) / "scenarios"))
    if (e.path().extension() == ".json") v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

class ShippedScenario : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ShippedScenario, SimulatesCleanly) {
  Scenario s = load_scenario_file(GetParam());
  auto r = sim::simulate_scenario(s);
  EXPECT_TRUE(r.problems.empty()) << fullshard::testing::problems_text(r);
  EXPECT_FALSE(r.out_of_memory) << sim::report_summary(r);
  EXPECT_GT(r.step_time_s, 0);
  // A bounded number of steps is played, the rest extrapolated from a steady state.
  EXPECT_EQ(r.simulated_steps + r.extrapolated_steps, s.training.steps);
  EXPECT_TRUE(r.steady_state || r.extrapolated_steps == 0);
  for (const auto& c : r.classes) {
    EXPECT_LE(c.peak_reserved_bytes, r.capacity_bytes);
    EXPECT_GE(c.peak_reserved_bytes, c.peak_allocated_bytes);
    ASSERT_EQ(c.allocated_after_step.size(), static_cast<size_t>(r.simulated_steps));
    for (size_t i = 1; i < c.allocated_after_step.size(); ++i)
      EXPECT_EQ(c.allocated_after_step[i], c.allocated_after_step[0]) << "step " << i;
    uint64_t sum = 0;
    for (uint64_t v : c.breakdown_at_peak) sum += v;
    EXPECT_EQ(sum, c.peak_allocated_bytes);
  }
  if (s.world_size() <= 8) {
    sim::SimulateOptions all;
    all.all_ranks = true;
    auto ra = sim::simulate_scenario(s, all);
    EXPECT_TRUE(ra.problems.empty()) << fullshard::testing::problems_text(ra);
    for (const auto& c : r.classes)
      for (int rk : c.ranks) {
        EXPECT_EQ(ra.classes[rk].peak_allocated_bytes, c.peak_allocated_bytes);
        EXPECT_EQ(ra.classes[rk].peak_reserved_bytes, c.peak_reserved_bytes);
      }
    EXPECT_DOUBLE_EQ(ra.step_time_s, r.step_time_s);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ShippedScenario, ::testing::ValuesIn(shipped()),
                         [](const auto& info) {
                           std::string n = fs::path(info.param).stem().string();
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
