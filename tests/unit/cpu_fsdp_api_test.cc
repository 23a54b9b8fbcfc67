// FSDP2 behaviours a training script chooses, simulated and trained on the CPU backend.
// NOTE [World-size-1 shortcut] (core/fsdp/fsdp_param_group.cc): a parameter group whose shard
// group has one rank issues no all-gather and no reduce-scatter (HSDP keeps its replicate
// all-reduce), and the simulator's peaks still equal what the CPU backend measures; HSDP with
// one-rank shard groups trains as the unsharded job does.
// NOTE [Post-optimizer event] (core/fsdp/fully_shard.cc): fsdp.post_optim_event lets the first
// all-gathers of a step overlap the batch load; memory is unchanged.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;

json scenario(std::vector<int> mesh, bool offload = false) {
  TinyOptions o;
  o.mesh = std::move(mesh);
  o.batch = 2;
  o.seq = 8;
  o.cpu_offload = offload;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = tiny_scenario_json(o);
  j["model"] = {{"arch", "llama"}, {"name", "w1"},  {"vocab_size", 256}, {"dim", 8},
                {"n_layers", 2},   {"n_heads", 2},  {"n_kv_heads", 1},   {"ffn_dim", 12},
                {"max_seq_len", 16}};
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", 1.0}};
  j["training"]["seed"] = 5;
  return j;
}

struct Played {
  std::map<CollectiveKind, int> last_step;  // rank 0's collectives in the last step, by kind
  // Whether the first copy-in stream wait after the last step's batch load waits on an event
  // recorded before that load (the post-optimizer event) rather than after it.
  bool all_gather_waits_before_load = false;
  sim::SimulationReport report;
};

Played play(const json& j) {
  Played p;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    size_t load = 0;
    std::map<uint64_t, size_t> recorded;  // event -> index of its record
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const auto& in = prog.instrs[i];
      if (in.type == sim::InstrType::kKernel && in.op == OpKind::kLoadBatch) load = i;
      if (in.type == sim::InstrType::kRecordEvent) recorded[in.event] = i;
      if (in.step == last && in.type == sim::InstrType::kCollective) ++p.last_step[in.coll];
    }
    for (size_t i = load; i < prog.instrs.size(); ++i) {
      const auto& in = prog.instrs[i];
      if (in.type != sim::InstrType::kWaitEvent || in.stream != StreamRole::kAllGatherCopyIn)
        continue;
      p.all_gather_waits_before_load = recorded.at(in.event) < load;
      break;
    }
  };
  p.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.report.ok()) << problems_text(p.report);
  return p;
}

TEST(WorldSizeOne, NoAllGatherOrReduceScatter) {
  for (bool offload : {false, true}) {
    const Played one = play(scenario({1}, offload));
    EXPECT_EQ(one.last_step.count(CollectiveKind::kAllGather), 0u) << offload;
    EXPECT_EQ(one.last_step.count(CollectiveKind::kReduceScatter), 0u) << offload;
    EXPECT_EQ(one.last_step.count(CollectiveKind::kAllReduce), 0u) << offload;
  }
  // HSDP over one-rank shard groups: only the replicate all-reduces, one per unit with
  // gradients (the two blocks and the root) and none for the all-gathers.
  const Played hsdp = play(scenario({2, 1}));
  EXPECT_EQ(hsdp.last_step.count(CollectiveKind::kAllGather), 0u);
  EXPECT_EQ(hsdp.last_step.count(CollectiveKind::kReduceScatter), 0u);
  ASSERT_EQ(hsdp.last_step.count(CollectiveKind::kAllReduce), 1u);
  EXPECT_GE(hsdp.last_step.at(CollectiveKind::kAllReduce), 3);
  // The same job sharded over 2 ranks all-gathers and reduce-scatters.
  const Played two = play(scenario({2}));
  EXPECT_GT(two.last_step.at(CollectiveKind::kAllGather), 0);
  EXPECT_GT(two.last_step.at(CollectiveKind::kReduceScatter), 0);
}

TEST(WorldSizeOne, PredictedPeakMemoryEqualsMeasured) {
  predicted_peaks_equal_measured(parse_scenario(scenario({1})));
  predicted_peaks_equal_measured(parse_scenario(scenario({1}, true)));
  json raf = scenario({2, 1});
  raf["fsdp"]["reshard_after_forward"] = false;
  predicted_peaks_equal_measured(parse_scenario(raf));
  json accum = scenario({2, 1});
  accum["training"]["grad_accum_steps"] = 2;
  accum["training"]["grad_sync_during_accumulation"] = "reduce_scatter";
  predicted_peaks_equal_measured(parse_scenario(accum));
}

// The copy that replaces the reduce-scatter divides by a set gradient_divide_factor: with a
// factor of 2 on mesh [2, 1] (a summing all-reduce) the gradients are the same as the default
// average over the 2 replicas, so training matches the unsharded job.
TEST(WorldSizeOne, HsdpEqualsUnsharded) {
  json j = scenario({2, 1});
  j["fsdp"]["mixed_precision"] = json::object();  // fp32: NOTE [fp32 tolerance]
  sharded_equals_unsharded(j, unsharded_job(j, 2));
  const json ref = unsharded_job(j, 2);
  j["fsdp"]["gradient_divide_factor"] = 2.0;
  sharded_equals_unsharded(j, ref);
}

json h100(json j) {
  j["hardware"]["profile"] = "h100-sxm-80gb";
  j["training"]["seq_len"] = 16;
  return j;
}

TEST(PostOptimEvent, AllGatherWaitsOnTheEvent) {
  for (std::vector<int> mesh : {std::vector<int>{2}, std::vector<int>{2, 1}}) {
    json j = h100(scenario(mesh));
    const Played plain = play(j);
    j["fsdp"]["post_optim_event"] = true;
    const Played event = play(j);
    ASSERT_EQ(plain.report.classes.size(), event.report.classes.size());
    for (size_t i = 0; i < plain.report.classes.size(); ++i) {
      EXPECT_EQ(plain.report.classes[i].peak_allocated_bytes,
                event.report.classes[i].peak_allocated_bytes);
      EXPECT_EQ(plain.report.classes[i].peak_reserved_bytes,
                event.report.classes[i].peak_reserved_bytes);
    }
    // The step's first copy-in waits on the event recorded after the optimizer step, before the
    // next batch's load, instead of on everything the current stream ran until the forward. On
    // this tiny model the load ends before the root's hooks issue the all-gather, so the step
    // is no shorter.
    EXPECT_TRUE(event.all_gather_waits_before_load);
    EXPECT_FALSE(plain.all_gather_waits_before_load);
    EXPECT_LE(event.report.step_time_s, plain.report.step_time_s);
  }
}

TEST(PostOptimEvent, TrainsAndPredictedEqualsMeasured) {
  json j = scenario({2});
  j["fsdp"]["post_optim_event"] = true;
  predicted_peaks_equal_measured(parse_scenario(j));
  j["fsdp"]["mixed_precision"] = json::object();  // fp32: NOTE [fp32 tolerance]
  sharded_equals_unsharded(j, unsharded_job(j, 2));
  j["fsdp"]["post_optim_event"] = 1;
  try {
    parse_scenario(j);
    ADD_FAILURE() << "a non-bool post_optim_event parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.post_optim_event"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fullshard
