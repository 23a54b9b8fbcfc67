// NOTE [Block bounds] (simulator/planner/bounds.h): the 2-block proxy's bounds never exceed what
// the full simulation gives, for every candidate of small spaces (random models, meshes,
// checkpointing, batches, capacities), and a bound over capacity means the candidate really runs
// out of memory.
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "core/train/training_program.h"
#include "simulator/planner/bounds.h"
#include "simulator/planner/evaluate.h"
#include "simulator/planner/search_space.h"
#include "simulator/simulate.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

TEST(PlannerBounds, OwnerByName) {
  EXPECT_EQ(block_of("layers.0.attention.wq"), 0);
  EXPECT_EQ(block_of("layers.1 all_gather"), 1);
  EXPECT_EQ(block_of("layers.12.ffn_norm rstd"), 12);
  EXPECT_EQ(block_of("layers.x"), -1);
  EXPECT_EQ(block_of("layers.1x"), -1);
  EXPECT_EQ(block_of("output"), -1);
  EXPECT_EQ(block_of("root all_gather"), -1);
}

struct Exact {
  double step = 0;
  uint64_t allocated[2] = {0, 0};  // peak allocated with unlimited capacity, expandable off / on
};

Exact exact(const Scenario& s) {
  Exact e;
  for (int x = 0; x < 2; ++x) {
    Scenario t = s;
    t.hardware.allocator.expandable_segments = x == 1;
    t.hardware.allocator.capacity_bytes = std::numeric_limits<uint64_t>::max();
    sim::SimulateOptions o;
    o.checks = false;
    const auto r = sim::simulate_scenario(t, o);
    e.step = r.step_time_s;
    for (const auto& c : r.classes)
      e.allocated[x] = std::max(e.allocated[x], c.peak_allocated_bytes);
  }
  return e;
}

Bounds bound_of(const Scenario& s) {
  ProxyProfile p[3];
  std::array<const ProxyProfile*, 3> ptrs{};
  const auto blocks = block_checkpointing(s.training.activation_checkpointing, s.model.n_layers);
  for (BlockCheckpoint m : blocks) {
    const int i = static_cast<int>(m);
    if (!ptrs[i]) {
      p[i] = profile_proxy(s, m);
      ptrs[i] = &p[i];
    }
  }
  return combine_bounds(ptrs, blocks);
}

// "" when every bound holds, else what failed.
std::string bound_violation(const Scenario& s) {
  const Bounds b = bound_of(s);
  const Exact e = exact(s);
  std::string out;
  auto fail = [&](const std::string& what) { out += what + "; "; };
  if (!(b.step_time_s > 0)) fail("no time bound");
  if (b.step_time_s > e.step * (1 + 1e-12))
    fail("time bound " + std::to_string(b.step_time_s) + " > step " + std::to_string(e.step));
  if (b.peak_bytes == 0) fail("no memory bound");
  for (int x = 0; x < 2; ++x)
    if (b.peak_bytes > e.allocated[x])
      fail("memory bound " + std::to_string(b.peak_bytes) + " > peak allocated " +
           std::to_string(e.allocated[x]) + (x ? " (expandable)" : ""));
  // A bound above the capacity means out of memory, with either allocator setting.
  Scenario tight = s;
  tight.hardware.allocator.capacity_bytes = b.peak_bytes - 1;
  const ProgramEvaluation ev = evaluate_program(tight);
  if (!ev.memory[0].out_of_memory || !ev.memory[1].out_of_memory)
    fail("fits below the memory bound");
  return out;
}

RC_GTEST_PROP(PlannerBoundsProps, BoundsNeverExceedTheSimulation, ()) {
  const std::string model = *rc::gen::element<std::string>("tiny-llama", "tiny-gpt2");
  const int layers = *rc::gen::inRange(2, 7);
  const int gpn = *rc::gen::element(1, 2, 4);
  const int nodes = *rc::gen::inRange(1, 3);
  const json base = {{"model", {{"name", model}, {"n_layers", layers}}},
                     {"training", {{"seq_len", *rc::gen::element(16, 48, 64)}, {"steps", 2}}},
                     {"hardware",
                      {{"profile", *rc::gen::element<std::string>("h100-sxm-80gb", "a100-80gb")},
                       {"nodes", nodes},
                       {"gpus_per_node", gpn}}}};
  const Scenario base_s = parse_scenario(base);
  SpaceOptions so;
  so.gpus = nodes * gpn;
  so.gpus_per_node = gpn;
  so.n_layers = layers;
  so.global_batch = so.gpus * *rc::gen::inRange(1, 4);
  so.tp_degrees = tp_degrees(base_s.model, base_s.training.seq_len, so.gpus, gpn);
  const auto cs = enumerate_candidates(so);
  // A random candidate per case (each needs up to 3 proxies and 3 full simulations).
  for (int k = 0; k < 1; ++k) {
    const Candidate c = cs[*rc::gen::inRange<size_t>(0, cs.size())];
    const std::string v = bound_violation(candidate_scenario(base_s, c));
    if (!v.empty()) RC_LOG() << candidate_text(c) << ": " << v << "\n";
    RC_ASSERT(v.empty());
  }
}

TEST(PlannerBounds, EveryCandidateOfASmallSpace) {
  const json base = {
      {"model", {{"name", "tiny-llama"}, {"n_layers", 3}}},
      {"training", {{"seq_len", 32}, {"steps", 2}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 2}, {"gpus_per_node", 1}}}};
  const Scenario base_s = parse_scenario(base);
  SpaceOptions so;
  so.gpus = 2;
  so.gpus_per_node = 1;
  so.n_layers = 3;
  so.global_batch = 4;
  int checked = 0;
  for (const auto& c : enumerate_candidates(so)) {
    if (c.expandable_segments) continue;  // the bound and the check cover both settings
    EXPECT_EQ(bound_violation(candidate_scenario(base_s, c)), "") << candidate_text(c);
    ++checked;
  }
  EXPECT_EQ(checked, 6 * 3 * 2 * 4 * 2);
}

// The bounds' block attribution by name holds for tensor-parallel programs too: the tp
// collectives of a block are named after its modules ("layers.0.attention all_gather(seq)").
TEST(PlannerBounds, EveryTensorParallelCandidateOfASmallSpace) {
  const json base = {
      {"model", {{"name", "tiny-llama"}, {"n_layers", 3}}},
      {"training", {{"seq_len", 32}, {"steps", 2}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 2}}}};
  const Scenario base_s = parse_scenario(base);
  SpaceOptions so;
  so.gpus = 2;
  so.gpus_per_node = 2;
  so.n_layers = 3;
  so.global_batch = 2;
  so.tp_degrees = {2};
  int checked = 0;
  for (const auto& c : enumerate_candidates(so)) {
    if (c.expandable_segments) continue;
    ASSERT_EQ(c.tp, 2);
    EXPECT_EQ(bound_violation(candidate_scenario(base_s, c)), "") << candidate_text(c);
    ++checked;
  }
  EXPECT_EQ(checked, 3 * 3 * 2 * 4 * 2);
}

}  // namespace
}  // namespace fullshard::planner
