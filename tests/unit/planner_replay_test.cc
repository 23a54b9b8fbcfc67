// NOTE [Allocation replay] and NOTE [One recording per program]: one expandable-segments
// recording with unlimited capacity, replayed, gives what simulate_scenario gives for each
// allocator setting and capacity -- peaks to the byte, the out-of-memory verdict -- and the
// timing does not depend on the allocator.
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "simulator/planner/allocation_replay.h"
#include "simulator/planner/evaluate.h"
#include "simulator/simulate.h"
#include "tests/support/sim_support.h"

namespace fullshard::planner {
namespace {

using testing::TinyOptions;

struct Truth {
  bool oom = false;
  uint64_t reserved = 0, allocated = 0;
  double step = 0;
};

Truth simulate(Scenario s, bool expandable, uint64_t capacity) {
  s.hardware.allocator.expandable_segments = expandable;
  s.hardware.allocator.capacity_bytes = capacity;
  sim::SimulateOptions o;
  o.checks = false;
  const auto r = sim::simulate_scenario(s, o);
  Truth t;
  t.oom = r.out_of_memory;
  t.step = r.step_time_s;
  for (const auto& c : r.classes) {
    t.reserved = std::max(t.reserved, c.peak_reserved_bytes);
    t.allocated = std::max(t.allocated, c.peak_allocated_bytes);
  }
  return t;
}

TinyOptions random_tiny() {
  TinyOptions o;
  o.model = *rc::gen::element<std::string>("tiny-llama", "tiny-gpt2");
  o.mesh = *rc::gen::element(std::vector<int>{2}, std::vector<int>{4}, std::vector<int>{2, 2},
                             std::vector<int>{3});
  const int shard = o.mesh.back();
  using J = std::vector<nlohmann::json>;
  o.reshard_after_forward = *rc::gen::elementOf(
      J{nullptr, true, false, shard == 4 ? nlohmann::json(2) : nlohmann::json(true)});
  o.mixed_precision = *rc::gen::elementOf(J{nlohmann::json::object(),
                                            {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}},
                                            {{"param_dtype", "bf16"}}});
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.activation_checkpointing = *rc::gen::elementOf(
      J{"none", "full", "selective_op", {{"mode", "selective_layer"}, {"every", 2}}});
  o.grad_accum_steps = *rc::gen::inRange(1, 3);
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *rc::gen::element(16, 32, 64);
  return o;
}

RC_GTEST_PROP(PlannerReplay, ReplayEqualsSimulationForEveryAllocatorSetting, ()) {
  const Scenario s = testing::tiny_scenario(random_tiny());
  const Truth unlimited = simulate(s, true, std::numeric_limits<uint64_t>::max());
  // A capacity around the need: some settings fit, some retry (free cached segments), some OOM.
  const double f = *rc::gen::element(0.5, 0.8, 0.95, 1.0, 1.05, 1.5);
  const uint64_t capacity = static_cast<uint64_t>(static_cast<double>(unlimited.reserved) * f);
  Scenario at = s;
  at.hardware.allocator.capacity_bytes = capacity;
  const ProgramEvaluation ev = evaluate_program(at);
  RC_ASSERT(!ev.problems);
  for (int e = 0; e < 2; ++e) {
    const Truth t = simulate(s, e == 1, capacity);
    const MemoryOutcome& m = ev.memory[e];
    RC_ASSERT(m.out_of_memory == t.oom);
    RC_ASSERT(m.peak_reserved_bytes == t.reserved);
    RC_ASSERT(m.peak_allocated_bytes == t.allocated);
    const Truth need = simulate(s, e == 1, std::numeric_limits<uint64_t>::max());
    RC_ASSERT(m.needed_reserved_bytes == (t.oom ? need.reserved : t.reserved));
    if (!t.oom) RC_ASSERT(ev.step_time_s == t.step);  // timing does not depend on the allocator
  }
}

TEST(PlannerReplay, ExpandableRecordingHandsOutRoundedRequests) {
  Scenario s = testing::tiny_scenario({});
  s.hardware.allocator.expandable_segments = true;
  sim::SimulateOptions o;
  o.checks = false;
  std::vector<AllocRequest> reqs;
  o.on_played = [&](const sim::PlayedRun& run) { reqs = device_requests(run.programs.front()); };
  sim::simulate_scenario(s, o);
  ASSERT_FALSE(reqs.empty());
  size_t allocs = 0;
  for (const auto& q : reqs)
    if (q.is_alloc) {
      ++allocs;
      EXPECT_EQ(q.bytes % 512, 0u);
    }
  EXPECT_GT(allocs, 10u);
  // Replaying at a capacity below the first allocation fails at once.
  AllocatorOptions tiny;
  tiny.capacity_bytes = 1;
  const ReplayResult r = replay(reqs, tiny);
  EXPECT_TRUE(r.out_of_memory);
}

}  // namespace
}  // namespace fullshard::planner
