// NOTE [Kernel placement] in simulator/sim_backend.cc: with CPU offload the optimizer step and
// host-gradient work are CPU kernels and the offload copies cross the host link; without it
// every kernel runs on the device.
#include <gtest/gtest.h>

#include <map>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

std::map<sim::KernelPlace, int> places(const testing::TinyOptions& o,
                                       std::map<OpKind, sim::KernelPlace>* adam = nullptr) {
  std::map<sim::KernelPlace, int> count;
  sim::SimulateOptions so;
  so.on_played = [&](const sim::PlayedRun& run) {
    for (const auto& in : run.programs.front().instrs) {
      if (in.type != sim::InstrType::kKernel) continue;
      ++count[in.place];
      if (adam && in.op == OpKind::kAdamW) (*adam)[in.op] = in.place;
    }
  };
  sim::simulate_scenario(testing::tiny_scenario(o), so);
  return count;
}

TEST(KernelPlacement, OffloadRunsTheOptimizerOnTheHost) {
  testing::TinyOptions o;
  o.cpu_offload = true;
  std::map<OpKind, sim::KernelPlace> adam;
  auto c = places(o, &adam);
  EXPECT_GT(c[sim::KernelPlace::kHostToDevice], 0);
  EXPECT_GT(c[sim::KernelPlace::kDeviceToHost], 0);
  EXPECT_GT(c[sim::KernelPlace::kHost], 0);
  EXPECT_GT(c[sim::KernelPlace::kDevice], 0);
  EXPECT_EQ(adam[OpKind::kAdamW], sim::KernelPlace::kHost);

  o.cpu_offload = false;
  c = places(o);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_GT(c[sim::KernelPlace::kDevice], 0);
}

}  // namespace
}  // namespace fullshard
