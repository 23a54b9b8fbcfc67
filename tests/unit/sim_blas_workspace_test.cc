// PyTorch's cuBLAS workspaces (NOTE [cuBLAS workspaces] in core/runtime/backend.cc): the first
// GEMM of each (host thread, stream) pair takes the profile's blas_workspace_bytes from the
// caching allocator and keeps it. A training step's forward runs on the main thread and its
// backward (with activation checkpointing's recomputation) on autograd's, both on the compute
// stream: two workspaces for the whole run, whatever the steps, micro-batches or AC mode.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;
using testing::TinyOptions;

struct Workspaces {
  std::vector<std::string> names;  // in allocation order
  std::vector<uint64_t> steps;     // allocated-bytes step of each
  uint64_t end_bytes = 0;          // category "workspaces" at the last timeline point
  uint64_t peak_allocated = 0;
  int frees = 0;
};

Workspaces workspaces(const TinyOptions& o) {
  sim::SimulateOptions so;
  so.max_timeline_points = 1u << 30;  // every allocation
  const sim::SimulationReport r = sim::simulate_scenario(testing::tiny_scenario(o), so);
  EXPECT_TRUE(r.ok()) << testing::problems_text(r);
  const auto& c = r.classes.at(0);
  Workspaces w;
  w.peak_allocated = c.peak_allocated_bytes;
  if (!c.timeline.empty())
    w.end_bytes = c.timeline.back().by_category[static_cast<size_t>(MemCategory::kWorkspace)];
  for (size_t i = 1; i < c.timeline.size(); ++i) {
    const auto& p = c.timeline[i];
    const uint64_t before =
        c.timeline[i - 1].by_category[static_cast<size_t>(MemCategory::kWorkspace)];
    const uint64_t after = p.by_category[static_cast<size_t>(MemCategory::kWorkspace)];
    if (after < before) ++w.frees;
    if (after <= before) continue;
    w.names.push_back(p.what >= 0 ? c.timeline_names.at(static_cast<size_t>(p.what)) : "?");
    w.steps.push_back(p.allocated_bytes - c.timeline[i - 1].allocated_bytes);
  }
  return w;
}

TEST(BlasWorkspaces, AGpuProfileHoldsTheForwardsAndTheBackwardsWorkspace) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 2;
  o.hardware_extra = {{"profile", "h100"}};
  const Workspaces w = workspaces(o);
  ASSERT_EQ(w.names.size(), 2u);
  EXPECT_EQ(w.names[0], "cuBLAS workspace (main thread)");
  EXPECT_EQ(w.names[1], "cuBLAS workspace (autograd thread)");
  for (uint64_t s : w.steps) EXPECT_EQ(s, uint64_t{32} << 20);  // 4096 KiB x 8 on Hopper
  EXPECT_EQ(w.end_bytes, uint64_t{64} << 20);
  EXPECT_EQ(w.frees, 0);

  o.hardware_extra = {{"profile", "a100"}};
  const Workspaces a = workspaces(o);
  ASSERT_EQ(a.names.size(), 2u);
  // 4096 KiB x 2 + 16 KiB x 8, already a multiple of the allocator's 512 B.
  for (uint64_t s : a.steps) EXPECT_EQ(s, uint64_t{8519680});
}

TEST(BlasWorkspaces, NoneOnTheCpuProfileOrWhenTheScenarioSetsZero) {
  TinyOptions o;
  EXPECT_TRUE(workspaces(o).names.empty());  // the cpu profile: 0
  o.hardware_extra = {{"profile", "h100"}, {"blas_workspace_bytes", 0}};
  EXPECT_TRUE(workspaces(o).names.empty());
}

// Whatever the run, exactly one workspace per host thread, each the requested bytes as the
// caching allocator counts them, never freed; and the workspaces cost the peak at most their own
// bytes.
RC_GTEST_PROP(BlasWorkspaces, OnePerHostThreadForTheWholeRun, ()) {
  TinyOptions o;
  o.mesh = *rc::gen::element(std::vector<int>{1}, std::vector<int>{2}, std::vector<int>{3});
  o.activation_checkpointing = *rc::gen::element(json("none"), json("full"), json("selective_op"));
  o.grad_accum_steps = *rc::gen::inRange(1, 3);
  o.steps = *rc::gen::inRange(1, 3);
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = *rc::gen::inRange(2, 24);
  o.mixed_precision =
      *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}});
  const uint64_t bytes = *rc::gen::inRange<uint64_t>(1, uint64_t{40} << 20);
  o.hardware_extra = {{"profile", "h100"}, {"blas_workspace_bytes", bytes}};
  const Workspaces w = workspaces(o);
  RC_ASSERT(w.names.size() == 2u);
  RC_ASSERT(w.names[0] == "cuBLAS workspace (main thread)");
  RC_ASSERT(w.names[1] == "cuBLAS workspace (autograd thread)");
  // CUDACachingAllocator: 512 B granules; a large-pool block keeps a remainder of at most 1 MiB
  // unsplit (kSmallSize), so it may count up to 1 MiB more.
  const uint64_t rounded = (bytes + 511) / 512 * 512;
  uint64_t total = 0;
  for (uint64_t s : w.steps) {
    RC_ASSERT(s >= rounded);
    RC_ASSERT(s - rounded <= (bytes <= (uint64_t{1} << 20) ? 0 : uint64_t{1} << 20));
    total += s;
  }
  RC_ASSERT(w.frees == 0);
  RC_ASSERT(w.end_bytes == total);

  o.hardware_extra["blas_workspace_bytes"] = 0;
  const Workspaces none = workspaces(o);
  RC_ASSERT(none.names.empty());
  RC_ASSERT(w.peak_allocated >= none.peak_allocated);
  RC_ASSERT(w.peak_allocated - none.peak_allocated <= total);
}

}  // namespace
}  // namespace fullshard
