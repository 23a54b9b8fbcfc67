// Mixture-of-experts layers inside pipeline stages trained for real on the CPU backend (ranks
// as threads over one store; NOTE [MoE in pipeline stages] in core/train/pipeline_program.cc):
// scenarios/tiny-moe-pp2-cpu4.json (pp 2 x FSDP 2 with ep 2 carved out of each stage's FSDP
// ranks, 1F1B) and its GPipe, Interleaved1F1B and LoopedBFS variants, with ep 2 and without ep,
// and the zero-bubble schedules' split backward.
// Each trains as the same model without pp on the same data and init, and each rank's measured
// peaks are the simulator's to the byte, replaying the run's own routing where it sizes the
// all-to-all buffers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "core/scenario/moe_checks.h"
#include "simulator/simulate.h"
#include "tests/support/cpu_support.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using json = nlohmann::json;

namespace {

const char* const kSchedules[] = {"1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS"};

// The shipped scenario under `schedule`; `ep` 1 drops expert parallelism (the experts are then
// fully_shard-ed with their block over the stage's 2 FSDP ranks), `buffers` "routed" (PyTorch's
// sizes, the default) or "max".
json shipped(const std::string& schedule, int ep, int steps,
             const std::string& buffers = "routed") {
  std::ifstream f(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/tiny-moe-pp2-cpu4.json");
  json j = json::parse(f);
  j["pipeline_parallel"]["schedule"] = schedule;
  j["training"]["steps"] = steps;
  if (ep == 1)
    j.erase("expert_parallel");
  else
    j["expert_parallel"] = {{"degree", ep}, {"receive_buffers", buffers}};
  return j;
}

// The same model and data without pp or ep: FSDP over the 2 data-parallel ranks, each step 4
// micro-batches of 2 sequences, as the pipeline's 4 microbatches of 2 (NOTE [Pipeline loss
// tolerance] in cpu_pipeline_test.cc says why these are the same sequences and init).
json unsplit(json j) {
  j.erase("pipeline_parallel");
  j.erase("expert_parallel");
  j["name"] = "tiny-moe-fsdp2-accum4-cpu2";
  j["fsdp"]["mesh"] = {{"shape", {2}}};
  j["training"]["batch_per_rank"] = 2;
  j["training"]["grad_accum_steps"] = 4;
  j["hardware"]["gpus_per_node"] = 2;
  return j;
}

// Every rank's routing of `run` of `s`, call by call, as a --metrics file records it (with the
// order `s` calls its MoE layers in).
std::shared_ptr<RecordedRouting> routing_of(const RealRun& run, const Scenario& s) {
  auto rec = std::make_shared<RecordedRouting>();
  rec->num_experts = s.model.moe.num_experts;
  rec->source = "the run just made";
  rec->call_order = moe_call_order(s);
  for (const auto& r : run.ranks) {
    rec->calls.emplace_back();
    rec->step_calls.emplace_back();
    for (const auto& st : r.steps) {
      rec->calls.back().insert(rec->calls.back().end(), st.tokens_per_expert.begin(),
                               st.tokens_per_expert.end());
      rec->step_calls.back().push_back(st.tokens_per_expert.size());
    }
  }
  return rec;
}

void expect_peaks_equal(const RealRun& real, const Scenario& s) {
  sim::SimulateOptions all;
  all.all_ranks = true;
  const auto predicted = sim::simulate_scenario(s, all);
  ASSERT_TRUE(predicted.problems.empty()) << problems_text(predicted);
  ASSERT_EQ(predicted.classes.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(real.ranks[r].report.peak_allocated_bytes, predicted.classes[r].peak_allocated_bytes)
        << "rank " << r;
    EXPECT_EQ(real.ranks[r].report.peak_reserved_bytes, predicted.classes[r].peak_reserved_bytes)
        << "rank " << r;
    EXPECT_EQ(real.ranks[r].report.moe_at_peak, predicted.classes[r].moe_at_peak) << "rank " << r;
  }
}

}  // namespace

// The routing is per token, so splitting the model into stages, its batch into microbatches and
// its experts over ep routes every token as the unsplit run does: the losses agree within the
// MoE tests' per-step loss tolerance (1e-4, cpu_moe_training_prop_test.cc), and the loss falls.
TEST(CpuPipelineMoe, LossesMatchTheUnsplitModel) {
  const int steps = 8;
  const RealRun ref = run_real(parse_scenario(unsplit(shipped("1F1B", 2, steps))), steps);
  ASSERT_EQ(ref.mean_loss.size(), static_cast<size_t>(steps));
  EXPECT_LT(ref.mean_loss.back(), ref.mean_loss.front() - 0.3);  // it trains
  for (int ep : {2, 1})
    for (const std::string schedule : kSchedules) {
      SCOPED_TRACE(schedule + " ep " + std::to_string(ep));
      const RealRun pp = run_real(parse_scenario(shipped(schedule, ep, steps)), steps);
      ASSERT_EQ(pp.mean_loss.size(), static_cast<size_t>(steps));
      double worst = 0;
      for (int k = 0; k < steps; ++k) {
        EXPECT_NEAR(pp.mean_loss[k], ref.mean_loss[k], 1e-4) << "step " << k;
        worst = std::max(worst, std::abs(pp.mean_loss[k] - ref.mean_loss[k]));
      }
      EXPECT_LT(pp.mean_loss.back(), pp.mean_loss.front() - 0.3);
      std::printf("%s ep %d: loss %.6f -> %.6f, largest difference from the unsplit run %.3g\n",
                  schedule.c_str(), ep, pp.mean_loss.front(), pp.mean_loss.back(), worst);
    }
}

// With "routed" receive buffers each microbatch's dispatch allocates what its routing sends, so
// the simulator replays the run's recording (per rank, in call order: each stage's MoE layers
// per microbatch) and predicts every rank's peaks to the byte. The recording holds a call per
// MoE layer of the rank's stages and microbatch, and the microbatches' loads differ.
TEST(CpuPipelineMoe, RoutedBuffersPeaksEqualTheReplayOfTheRunsRouting) {
  for (const std::string schedule : kSchedules) {
    SCOPED_TRACE(schedule);
    Scenario s = parse_scenario(shipped(schedule, 2, 2));
    const RealRun real = run_real(s, 2);
    auto rec = routing_of(real, s);
    // 1F1B and GPipe: pp rank 0 holds layer 0, pp rank 1 layer 1; the looped schedules' 4
    // stages (e, layers.0, layers.1, norm + output) put layers.1 on pp rank 0 and layers.0 on 1.
    for (size_t r = 0; r < 4; ++r) {
      ASSERT_EQ(rec->step_calls[r], (std::vector<size_t>{4, 4})) << "rank " << r;
      bool differ = false;
      for (size_t k = 1; k < 4; ++k) differ = differ || rec->calls[r][k] != rec->calls[r][0];
      EXPECT_TRUE(differ) << "rank " << r << ": every microbatch routed alike";
    }
    // The assumed (balanced) routing misses some rank's peak: the replay is what makes it exact.
    sim::SimulateOptions all;
    all.all_ranks = true;
    const auto assumed = sim::simulate_scenario(s, all);
    bool missed = false;
    for (int r = 0; r < 4; ++r)
      missed = missed ||
               assumed.classes[r].peak_allocated_bytes != real.ranks[r].report.peak_allocated_bytes;
    EXPECT_TRUE(missed);
    s.training.moe_routing_record = rec;
    check_recorded_routing(s);
    expect_peaks_equal(real, s);
  }
}

// A 4-layer tiny-moe under the looped schedules, split explicitly into stages e + layers.0,
// layers.1, layers.2, layers.3 + norm + output: each rank's two stages both hold a MoE layer,
// so one rank's recording interleaves two stages' calls in the schedule's order; with and
// without checkpointing.
TEST(CpuPipelineMoe, TwoStagesWithExpertsPerRankReplayInScheduleOrder) {
  for (const std::string schedule : {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"})
    for (const char* ac : {"none", "full"}) {
      if (schedule == "InterleavedZeroBubble" && std::string(ac) == "full") continue;  // refused
      SCOPED_TRACE(schedule + " AC " + ac);
      json j = shipped(schedule, 2, 2);
      j["model"] = {{"name", "tiny-moe"}, {"n_layers", 4}};
      j["pipeline_parallel"]["module_fqns_per_model_part"] =
          json::parse(R"([["tok_embeddings", "layers.0"], ["layers.1"], ["layers.2"],
                          ["layers.3", "norm", "output"]])");
      j["training"]["activation_checkpointing"] = ac;
      Scenario s = parse_scenario(j);
      ASSERT_EQ(s.pipeline.stages.size(), 4u);
      for (const auto& st : s.pipeline.stages) ASSERT_EQ(st.num_layers, 1);
      const RealRun real = run_real(s, 2);
      auto rec = routing_of(real, s);
      const size_t per_step = std::string(ac) == "full" ? 16 : 8;  // 2 layers x 4 microbatches
      for (size_t r = 0; r < 4; ++r)
        ASSERT_EQ(rec->step_calls[r], (std::vector<size_t>{per_step, per_step})) << "rank " << r;
      s.training.moe_routing_record = rec;
      check_recorded_routing(s);
      expect_peaks_equal(real, s);
      // The other looped schedule calls as many times a step, in another order: refused.
      json k = j;
      k["pipeline_parallel"]["schedule"] =
          schedule == "LoopedBFS" ? "Interleaved1F1B" : "LoopedBFS";
      Scenario other = parse_scenario(k);
      other.training.moe_routing_record = rec;
      const std::string e = input_error_of([&] { check_recorded_routing(other); });
      EXPECT_NE(e.find("where this scenario calls them as pipeline " +
                       k["pipeline_parallel"]["schedule"].get<std::string>()),
                std::string::npos)
          << e;
    }
}

// Activation checkpointing recomputes each MoE block in its backward: two calls per layer and
// microbatch, replayed as recorded.
TEST(CpuPipelineMoe, CheckpointedBlocksReplayTheirRecomputes) {
  json j = shipped("1F1B", 2, 2);
  j["training"]["activation_checkpointing"] = "full";
  Scenario s = parse_scenario(j);
  const RealRun real = run_real(s, 2);
  auto rec = routing_of(real, s);
  for (size_t r = 0; r < 4; ++r) ASSERT_EQ(rec->step_calls[r], (std::vector<size_t>{8, 8}));
  s.training.moe_routing_record = rec;
  check_recorded_routing(s);
  expect_peaks_equal(real, s);
  // The same record against the scenario without checkpointing: one line naming the field.
  Scenario plain = parse_scenario(shipped("1F1B", 2, 2));
  plain.training.moe_routing_record = rec;
  const std::string e = input_error_of([&] { check_recorded_routing(plain); });
  EXPECT_NE(e.find("training.moe_routing.recorded"), std::string::npos) << e;
  EXPECT_NE(e.find("pipeline_parallel"), std::string::npos) << e;
}

// Buffers for the most a rank can receive, and no ep at all: the routing moves no byte, and the
// simulator's assumed routing predicts the run.
TEST(CpuPipelineMoe, StaticBuffersPeaksEqualTheSimulatorsWithoutARecord) {
  for (const std::string schedule : kSchedules)
    for (int ep : {2, 1}) {
      SCOPED_TRACE(schedule + " ep " + std::to_string(ep));
      const Scenario s = parse_scenario(shipped(schedule, ep, 2, "max"));
      expect_peaks_equal(run_real(s, 2), s);
    }
}

// "max" buffers with token dropping: the combine returns the kept rows, as many as the router
// kept (NOTE [Receive buffers] in core/scenario/scenario.h), so the run's routing is replayed.
// The shape CpuPipelineMoeProp found (seed 7): there the assumed routing missed rank 3's peak by
// 512 B.
TEST(CpuPipelineMoe, MaxBuffersWithTokenDroppingReplayTheKeptRows) {
  json j = shipped("1F1B", 2, 2, "max");
  j["model"] = {{"name", "tiny-moe"}, {"moe", {{"capacity_factor", 1.0}}}};
  j["training"]["seq_len"] = 13;
  j["training"]["batch_per_rank"] = 2;
  j["training"]["activation_checkpointing"] = "full";
  j["pipeline_parallel"]["microbatch_size"] = 1;
  Scenario s = parse_scenario(j);
  const RealRun real = run_real(s, 2);
  s.training.moe_routing_record = routing_of(real, s);
  check_recorded_routing(s);
  expect_peaks_equal(real, s);
}

// The zero-bubble schedules split each stage's backward into I and W; the experts' grouped GEMMs
// defer their weight gradients to W as torchtitan's _grouped_mm override does (NOTE [Split
// backward] in core/model/autograd.h). Each trains as the unsplit model, and the replay of its
// routing predicts every rank's peaks to the byte (the V schedules put stages 1 and 2 on rank 1).
TEST(CpuPipelineMoe, SplitBackwardSchedulesTrainExperts) {
  const int steps = 4;
  const RealRun ref = run_real(parse_scenario(unsplit(shipped("1F1B", 2, steps))), steps);
  for (const std::string schedule : {"InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}) {
    SCOPED_TRACE(schedule);
    Scenario s = parse_scenario(shipped(schedule, 2, steps));
    const RealRun real = run_real(s, steps);
    for (int k = 0; k < steps; ++k)
      EXPECT_NEAR(real.mean_loss[k], ref.mean_loss[k], 1e-4) << "step " << k;
    s.training.moe_routing_record = routing_of(real, s);
    check_recorded_routing(s);
    expect_peaks_equal(real, s);
  }
}

// A checkpointed MoE block under a split backward runs its forward again at I and at each of its
// weight ops' W (NOTE [Split backward of a checkpointed block] in core/model/autograd.cc), its
// router and all-to-alls included. Under ZBVZeroBubble pp rank 1 (ranks 2 and 3) holds both
// layers (stages 1 and 2): per layer and microbatch the forward, I's recompute and 13 W
// recomputes (wq, wk, wv, wo, the two norms, the router's gate, the experts' w1, w2, w3 and the
// shared expert's), so 2 x 4 x 15 calls a step; check_recorded_routing counts the same, the
// replay predicts every rank's peaks, and the losses are the unsplit model's with the same
// checkpointing.
TEST(CpuPipelineMoe, SplitBackwardReplaysEachRecomputeOfACheckpointedBlock) {
  const int steps = 2;
  json j = shipped("ZBVZeroBubble", 2, steps);
  j["training"]["activation_checkpointing"] = "full";
  Scenario s = parse_scenario(j);
  const RealRun real = run_real(s, steps);
  const RealRun ref = run_real(parse_scenario(unsplit(j)), steps);
  for (int k = 0; k < steps; ++k)
    EXPECT_NEAR(real.mean_loss[k], ref.mean_loss[k], 1e-4) << "step " << k;
  auto rec = routing_of(real, s);
  for (size_t r = 0; r < 4; ++r)
    EXPECT_EQ(rec->step_calls[r], (std::vector<size_t>(steps, r < 2 ? 0 : 2 * 4 * 15)))
        << "rank " << r;
  s.training.moe_routing_record = rec;
  check_recorded_routing(s);
  expect_peaks_equal(real, s);
  // DualPipeV runs most microbatches as a full backward (one recompute) and some as I / W: the
  // recorded calls are counted per action of the rank's schedule.
  json dj = j;
  dj["pipeline_parallel"]["schedule"] = "DualPipeV";
  Scenario d = parse_scenario(dj);
  const RealRun dreal = run_real(d, steps);
  auto drec = routing_of(dreal, d);
  EXPECT_LT(drec->step_calls[2][0], 2u * 4 * 15);
  EXPECT_GT(drec->step_calls[2][0], 2u * 4 * 2);
  d.training.moe_routing_record = drec;
  check_recorded_routing(d);
  expect_peaks_equal(dreal, d);
  // The same record against an unsplit schedule (another call order, two calls per layer and
  // microbatch): refused, naming the field.
  json plain = j;
  plain["pipeline_parallel"]["schedule"] = "Interleaved1F1B";
  Scenario p = parse_scenario(plain);
  p.training.moe_routing_record = rec;
  const std::string e = input_error_of([&] { check_recorded_routing(p); });
  EXPECT_NE(e.find("training.moe_routing.recorded"), std::string::npos) << e;
}
