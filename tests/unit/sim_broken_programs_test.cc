// Deliberately broken host programs must be caught with a message naming the problem:
// a rank skipping a collective, a missing event wait, an early free.
#include <gtest/gtest.h>

#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;

namespace {

sim::SimulationReport run_mutated(std::function<void(sim::Program&)> f) {
  TinyOptions o;
  o.mesh = {2};
  sim::SimulateOptions so;
  so.all_ranks = true;
  so.mutate_program = std::move(f);
  return sim::simulate_scenario(tiny_scenario(o), so);
}

bool has(const sim::SimulationReport& r, sim::ProblemKind k, const std::string& text) {
  for (const auto& p : r.problems)
    if (p.kind == k && p.message.find(text) != std::string::npos) return true;
  return false;
}

size_t find_instr(const sim::Program& p, sim::InstrType t, const std::string& name_part,
                  size_t from = 0) {
  for (size_t i = from; i < p.instrs.size(); ++i)
    if (p.instrs[i].type == t && p.names[p.instrs[i].name].find(name_part) != std::string::npos)
      return i;
  return p.instrs.size();
}

}  // namespace

TEST(BrokenPrograms, CorrectProgramHasNoProblems) {
  auto r = run_mutated([](sim::Program&) {});
  EXPECT_TRUE(r.problems.empty()) << problems_text(r);
}

TEST(BrokenPrograms, RankSkippingACollectiveIsReported) {
  auto r = run_mutated([](sim::Program& p) {
    if (p.rank != 1) return;
    size_t i = find_instr(p, sim::InstrType::kCollective, "layers.0 all_gather");
    ASSERT_LT(i, p.instrs.size());
    p.instrs.erase(p.instrs.begin() + static_cast<long>(i));
  });
  ASSERT_FALSE(r.problems.empty());
  bool named = false;
  for (const auto& p : r.problems)
    if ((p.kind == sim::ProblemKind::kCollectiveMismatch ||
         p.kind == sim::ProblemKind::kCollectiveHang) &&
        p.message.find("shard [0,1]") != std::string::npos &&
        p.message.find("step 0") != std::string::npos)
      named = true;
  EXPECT_TRUE(named) << problems_text(r);
}

TEST(BrokenPrograms, MissingEventWaitIsARace) {
  // Drop the all-gather stream's wait on the copy-in stream before the first all-gather.
  auto r = run_mutated([](sim::Program& p) {
    size_t ag = find_instr(p, sim::InstrType::kCollective, "all_gather");
    ASSERT_LT(ag, p.instrs.size());
    for (size_t i = ag; i-- > 0;)
      if (p.instrs[i].type == sim::InstrType::kWaitEvent &&
          p.instrs[i].stream == StreamRole::kAllGather) {
        p.instrs.erase(p.instrs.begin() + static_cast<long>(i));
        return;
      }
    FAIL() << "no wait before the all-gather";
  });
  EXPECT_TRUE(has(r, sim::ProblemKind::kStreamRace, "all_gather")) << problems_text(r);
}

TEST(BrokenPrograms, EarlyFreeIsAUseAfterFree) {
  // Free the first all-gather output right after its collective, before the copy-out reads it.
  auto r = run_mutated([](sim::Program& p) {
    size_t ag = find_instr(p, sim::InstrType::kCollective, "all_gather");
    size_t alloc = find_instr(p, sim::InstrType::kAlloc, "all_gather_output");
    ASSERT_LT(alloc, ag);
    uint64_t buf = p.instrs[alloc].buffer;
    for (size_t i = ag; i < p.instrs.size(); ++i)
      if (p.instrs[i].type == sim::InstrType::kFree && p.instrs[i].buffer == buf) {
        sim::Instr f = p.instrs[i];
        p.instrs.erase(p.instrs.begin() + static_cast<long>(i));
        p.instrs.insert(p.instrs.begin() + static_cast<long>(ag) + 1, f);
        return;
      }
    FAIL() << "all-gather output never freed";
  });
  bool found = false;
  for (const auto& pr : r.problems)
    if ((pr.kind == sim::ProblemKind::kUseAfterFree ||
         pr.kind == sim::ProblemKind::kFreeWhileInUse) &&
        pr.message.find("all_gather_output") != std::string::npos)
      found = true;
  EXPECT_TRUE(found) << problems_text(r);
}
