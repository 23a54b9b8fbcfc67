// NOTE [Branch and bound] (simulator/planner/planner.h): on small spaces searched exhaustively
// (every candidate simulated), the pruned search recommends the same configuration with the same
// figures, every candidate it reports as simulated has the exhaustive figures, every candidate it
// rules out by memory does not fit, and every candidate it rules out by time does not beat the
// winner.
#include <map>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/planner/planner.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

std::string key(const Candidate& c) { return candidate_text(c); }

struct Case {
  std::string model;
  int layers, nodes, gpn, seq;
  int64_t per_gpu_batch;  // sequences per GPU per step (0: free micro-batch 1, 2)
  double capacity_mib;    // allocator capacity per GPU
  std::string profile = "h100-sxm-80gb";
  std::vector<int> ep = {};   // expert-parallel degrees to search (MoE models)
  std::vector<int> pp = {1};  // pipeline-parallel degrees to search (need per_gpu_batch)
};

PlanOptions options(const Case& k) {
  const json j = {
      {"model", {{"name", k.model}, {"n_layers", k.layers}}},
      {"training", {{"seq_len", k.seq}, {"steps", 2}}},
      {"hardware",
       {{"profile", k.profile},
        {"nodes", k.nodes},
        {"gpus_per_node", k.gpn},
        {"memory_bytes", static_cast<int64_t>(k.capacity_mib * 1048576) + (int64_t{1} << 30)},
        {"non_allocator_bytes", int64_t{1} << 30}}}};
  PlanOptions o;
  o.base = parse_scenario(j);
  o.space.gpus = k.nodes * k.gpn;
  o.space.gpus_per_node = k.gpn;
  o.space.n_layers = k.layers;
  if (k.per_gpu_batch > 0)
    o.space.global_batch = k.per_gpu_batch * o.space.gpus;
  else
    o.space.micro_batches = {1, 2};
  o.space.ep_degrees = k.ep;
  o.space.pp_degrees = k.pp;
  return o;
}

void expect_same_answer(const Case& k) {
  PlanOptions o = options(k);
  o.prune = false;
  const PlanResult all = plan(o);
  o.prune = true;
  const PlanResult pruned = plan(o);
  ASSERT_TRUE(pruned.pruning);
  ASSERT_EQ(all.evaluated, pruned.evaluated);
  EXPECT_EQ(all.simulated, all.evaluated);
  std::map<std::string, const ConfigResult*> truth;
  for (const auto& r : all.configs) truth[key(r.candidate)] = &r;
  ASSERT_EQ(truth.size(), all.configs.size());

  // The recommendation.
  ASSERT_FALSE(pruned.configs.empty());
  const ConfigResult& a = all.configs.front();
  const ConfigResult& b = pruned.configs.front();
  EXPECT_EQ(key(a.candidate), key(b.candidate));
  EXPECT_EQ(a.fits, b.fits);
  if (a.fits) {
    EXPECT_EQ(a.tokens_per_s_per_gpu, b.tokens_per_s_per_gpu);
    EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
  }
  const double best = a.fits ? a.tokens_per_s_per_gpu : 0;
  size_t fitting_simulated = 0;
  for (const auto& r : pruned.configs) {
    const ConfigResult& t = *truth.at(key(r.candidate));
    switch (r.verdict) {
      case Verdict::kSimulated:
        EXPECT_EQ(r.fits, t.fits) << key(r.candidate);
        EXPECT_EQ(r.peak_reserved_bytes, t.peak_reserved_bytes) << key(r.candidate);
        EXPECT_EQ(r.needed_bytes, t.needed_bytes) << key(r.candidate);
        EXPECT_EQ(r.step_time_s, t.step_time_s) << key(r.candidate);
        if (r.fits) ++fitting_simulated;
        break;
      case Verdict::kMemoryBound:
        EXPECT_FALSE(t.fits) << key(r.candidate);
        EXPECT_LE(r.needed_bytes, t.needed_bytes) << key(r.candidate);
        break;
      case Verdict::kTimeBound:
        EXPECT_TRUE(!t.fits || t.tokens_per_s_per_gpu <= best) << key(r.candidate);
        EXPECT_GE(r.tokens_per_s_per_gpu, t.tokens_per_s_per_gpu * (1 - 1e-12)) << key(r.candidate);
        break;
    }
  }
  // Every exhaustive configuration at least as fast as the winner is reported exactly.
  size_t as_fast = 0;
  for (const auto& r : all.configs)
    if (r.fits && r.tokens_per_s_per_gpu >= best) ++as_fast;
  EXPECT_GE(fitting_simulated, as_fast);
  // The exhaustive and pruned rankings agree on the configurations both simulated and that fit.
  std::vector<std::string> order_all, order_pruned;
  for (const auto& r : pruned.configs)
    if (r.verdict == Verdict::kSimulated && r.fits) order_pruned.push_back(key(r.candidate));
  for (const auto& r : all.configs)
    if (r.fits &&
        std::find(order_pruned.begin(), order_pruned.end(), key(r.candidate)) != order_pruned.end())
      order_all.push_back(key(r.candidate));
  EXPECT_EQ(order_all, order_pruned);
  ::testing::Test::RecordProperty("pruned_simulated", static_cast<int>(pruned.simulated));
}

TEST(PlannerPrune, SameWinnerOnSmallSpaces) {
  // Capacities chosen around what these models need, so that memory rules out some settings
  // (and in the last cases everything but offload, or everything).
  const std::vector<Case> cases = {
      {"tiny-llama", 3, 2, 2, 32, 1, 64},
      {"tiny-llama", 2, 1, 4, 64, 2, 6},
      {"tiny-gpt2", 3, 2, 1, 64, 0, 5},
      {"tiny-gpt2", 2, 2, 1, 32, 1, 2.5, "a100-80gb"},  // only a few settings fit
      {"tiny-llama", 3, 1, 2, 32, 1, 0.5},              // nothing fits: the closest is exact
      {"tiny-moe", 2, 1, 4, 32, 1, 40, "h100-sxm-80gb", {1, 2, 4}},    // ep is searched too
      {"tiny-llama", 4, 1, 4, 32, 2, 8, "h100-sxm-80gb", {}, {1, 2}},  // and pp
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.model + " x" + std::to_string(k.layers) + " on " + std::to_string(k.nodes) +
                 "x" + std::to_string(k.gpn) + ", " + std::to_string(k.capacity_mib) + " MiB");
    expect_same_answer(k);
  }
}

TEST(PlannerPrune, SameWinnerOnRandomSmallSpaces) {
  std::mt19937 rng(20261121);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 3; ++i) {
    Case k{pick(0, 1) ? "tiny-llama" : "tiny-gpt2",
           pick(2, 4),
           pick(1, 2),
           1 << pick(0, 1),
           16 * pick(1, 4),
           pick(1, 2),
           0.5 + pick(0, 40)};
    SCOPED_TRACE(k.model + " x" + std::to_string(k.layers) + " on " + std::to_string(k.nodes) +
                 "x" + std::to_string(k.gpn) + ", seq " + std::to_string(k.seq) + ", " +
                 std::to_string(k.capacity_mib) + " MiB");
    expect_same_answer(k);
  }
}

}  // namespace
}  // namespace fullshard::planner
