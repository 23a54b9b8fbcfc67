// Context parallelism trained for real on the CPU backend (ranks as threads over Gloo): each
// sequence split over the cp ranks (NOTE [Context-parallel layout]) with ring attention
// (NOTE [Ring attention rounds]) trains the same model as the same global batch without cp, and
// the simulator predicts every rank's peak memory to the byte.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

struct CpCase {
  int shard, cp;
  std::string rotate;
  json ac = "none";
  json mixed_precision = json::object();
};

json cp_job(const CpCase& c, bool with_cp) {
  TinyOptions o;
  o.mesh = {c.shard};
  o.steps = 3;
  o.seq = 24;  // 2 x cp chunks for cp 2 and 3
  o.batch = 2;
  o.activation_checkpointing = c.ac;
  o.mixed_precision = c.mixed_precision;
  json j = tiny_scenario_json(o);
  if (with_cp) {
    j["fsdp"]["mesh"] = {{"shape", {c.shard, c.cp}}, {"dim_names", {"dp_shard", "cp"}}};
    j["context_parallel"] = {{"rotate_method", c.rotate}};
    j["hardware"]["gpus_per_node"] = c.shard * c.cp;
  }
  return j;
}

std::string name(const CpCase& c) {
  return "dp_shard " + std::to_string(c.shard) + " x cp " + std::to_string(c.cp) + " " + c.rotate +
         " ac " + c.ac.dump() + " mp " + c.mixed_precision.dump();
}

void check(const CpCase& c, double loss_tol, double atol, double rtol) {
  const Scenario with = parse_scenario(cp_job(c, true));
  const Scenario without = parse_scenario(cp_job(c, false));
  sim::SimulateOptions so;
  so.all_ranks = true;
  const sim::SimulationReport pred = sim::simulate_scenario(with, so);
  ASSERT_TRUE(pred.ok()) << problems_text(pred);
  const RealRun real = run_real(with);
  const RealRun ref = run_real(without);
  ASSERT_EQ(real.mean_loss.size(), 3u);
  for (size_t k = 0; k < ref.mean_loss.size(); ++k)
    EXPECT_NEAR(real.mean_loss[k], ref.mean_loss[k], loss_tol) << name(c) << " step " << k;
  std::string where;
  EXPECT_LE(max_violation(real, ref, atol, rtol, &where), 1.0) << name(c) << ": " << where;
  ASSERT_EQ(pred.classes.size(), static_cast<size_t>(c.shard * c.cp));
  for (int r = 0; r < c.shard * c.cp; ++r) {
    EXPECT_EQ(real.ranks[r].report.peak_allocated_bytes, pred.classes[r].peak_allocated_bytes)
        << name(c) << " rank " << r;
    EXPECT_EQ(real.ranks[r].report.peak_reserved_bytes, pred.classes[r].peak_reserved_bytes)
        << name(c) << " rank " << r;
  }
}

}  // namespace

// fp32: only the order of the attention's sums differs (the ring merges per-round softmax
// partials through their logsumexps).
TEST(CpuContextParallel, AllToAllRingTrainsAsTheWholeSequence) {
  check({2, 2, "alltoall"}, 1e-5, 1e-5, 1e-3);
}

TEST(CpuContextParallel, AllGatherRingOfThreeTrainsAsTheWholeSequence) {
  check({1, 3, "allgather"}, 1e-5, 1e-5, 1e-3);
}

TEST(CpuContextParallel, RecomputedBlocksTrainAsTheWholeSequence) {
  check({1, 2, "allgather", "full"}, 1e-5, 1e-5, 1e-3);
}

// bf16 parameters: the ring's merge runs in fp32 as PyTorch's, but the per-round outputs are
// rounded to bf16 before it where the dense kernel rounds once.
TEST(CpuContextParallel, Bf16RingTrainsCloseToTheWholeSequence) {
  check({2, 2, "alltoall", "none", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}, 2e-2, 1e-3,
        2e-2);
}
