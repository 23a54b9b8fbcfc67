// Pipeline parallelism in the simulator over random shapes: random pp degrees, layer counts,
// splits (torchtitan's default or an explicit one), schedules and microbatch counts simulate
// without protocol problems (every send meets its recv on its channel, no deadlock, no race,
// no use after free); each rank sends and receives one tensor per microbatch and stage
// boundary; every parameter lives on exactly one stage; and a schedule that keeps fewer
// microbatches in flight on a rank (pipeline_timeline.h) gives that rank a lower peak than the
// all-forwards-first schedule (GPipe, LoopedBFS) on the same split.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/model/model_flops.h"
#include "core/model/transformer.h"
#include "core/pipeline/pipeline_timeline.h"
#include "tests/support/pipeline_support.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using testing::PipelineCase;

// An explicit split of `layers` layers into `stages` parts, random cut points (null when the
// middle parts cannot each get a layer).
nlohmann::json random_split(int layers, int stages) {
  std::vector<int> cuts = {0};
  // Middle parts get at least one layer (a part without modules is refused).
  for (int k = 1; k < stages; ++k) {
    const int lo = cuts.back() + (k > 1 ? 1 : 0), hi = layers - (stages - 1 - k);
    if (lo > hi) return nullptr;  // too few layers: torchtitan's split instead
    cuts.push_back(*rc::gen::inRange(lo, hi + 1));
  }
  cuts.push_back(layers);
  nlohmann::json parts = nlohmann::json::array();
  for (int k = 0; k < stages; ++k) {
    nlohmann::json p = nlohmann::json::array();
    if (k == 0) p.push_back("tok_embeddings");
    for (int l = cuts[k]; l < cuts[k + 1]; ++l) p.push_back("layers." + std::to_string(l));
    if (k == stages - 1) {
      p.push_back("norm");
      p.push_back("output");
    }
    parts.push_back(p);
  }
  return parts;
}

RC_GTEST_PROP(SimPipelineProp, RandomSchedulesSplitsAndMicrobatches, ()) {
  PipelineCase c;
  const bool multi = *rc::gen::arbitrary<bool>();
  c.pp = *rc::gen::inRange(2, 5);
  c.shard = *rc::gen::element(1, 2);
  RC_PRE(c.pp * c.shard <= 8);
  c.layers = *rc::gen::inRange(1, 9);
  // Interleaved1F1B takes a multiple of pp microbatches (PyTorch refuses others).
  c.microbatches = multi ? c.pp * *rc::gen::inRange(1, 3) : *rc::gen::inRange(1, 9);
  c.steps = 2;
  c.seq = 512;  // a microbatch's activations outweigh the optimizer's temporaries
  const int stages_per_rank = multi ? *rc::gen::inRange(2, 4) : 1;
  c.schedule = multi ? "Interleaved1F1B" : "1F1B";
  if (*rc::gen::arbitrary<bool>()) c.split = random_split(c.layers, c.pp * stages_per_rank);
  Scenario s;
  try {
    s = parse_scenario(testing::pipeline_scenario_json(c));
  } catch (const InputError& e) {     // a shape PyTorch refuses (microbatches vs pp), or a split
    RC_TAG("refused: " + e.where());  // torchtitan's default rule cannot make
    return;
  }
  RC_TAG(c.schedule);
  // Every parameter on exactly one stage.
  int64_t params = 0;
  for (const PipelineStageModules& m : s.pipeline.stages) {
    Transformer part(s.model, {}, ModelPart{m.embeddings, m.first_layer, m.num_layers, m.output});
    part.root().for_each_param([&](Param& p) { params += numel(p.shape); });
  }
  RC_ASSERT(params == parameter_count(s.model));

  const testing::PipelineRun run = testing::simulate_pipeline(s);
  RC_ASSERT(run.report.problems.empty());
  RC_ASSERT(!run.report.out_of_memory);
  const PipelineScheduleOptions o = s.pipeline.schedule_options();
  const int m = o.microbatches, n = o.num_stages();
  for (int k = 0; k < c.pp; ++k) {
    std::map<std::string, int> want;
    for (int st : pipeline_rank_stages(o, k)) {
      if (st > 0) {
        want["F recv"] += m;
        want["B send"] += m;
      }
      if (st + 1 < n) {
        want["F send"] += m;
        want["B recv"] += m;
      }
    }
    RC_ASSERT(run.transfers[static_cast<size_t>(k)] == want);
  }

  // The same split and microbatches with every forward first.
  PipelineCase all_first = c;
  all_first.schedule = multi ? "LoopedBFS" : "GPipe";
  all_first.split = nlohmann::json::array();
  for (const auto& st : s.pipeline.stages) {
    nlohmann::json p = nlohmann::json::array();
    if (st.embeddings) p.push_back("tok_embeddings");
    for (int l = st.first_layer; l < st.first_layer + st.num_layers; ++l)
      p.push_back("layers." + std::to_string(l));
    if (st.output) {
      p.push_back("norm");
      p.push_back("output");
    }
    all_first.split.push_back(p);
  }
  const Scenario sf = parse_scenario(testing::pipeline_scenario_json(all_first));
  const testing::PipelineRun rf = testing::simulate_pipeline(sf);
  RC_ASSERT(rf.report.problems.empty());
  const std::vector<int> in_flight = peak_in_flight_microbatches(build_pipeline_order(o));
  const std::vector<int> in_flight_all =
      peak_in_flight_microbatches(build_pipeline_order(sf.pipeline.schedule_options()));
  for (int k = 0; k < c.pp; ++k) {
    RC_ASSERT(in_flight[static_cast<size_t>(k)] <= in_flight_all[static_cast<size_t>(k)]);
    RC_ASSERT(run.peak[static_cast<size_t>(k)] <= rf.peak[static_cast<size_t>(k)]);
    if (in_flight[static_cast<size_t>(k)] < in_flight_all[static_cast<size_t>(k)])
      RC_ASSERT(run.peak[static_cast<size_t>(k)] < rf.peak[static_cast<size_t>(k)]);
  }
}

// The split-backward schedules (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV) over pp 2 to 4:
// their sends and recvs cross between ranks, which the lowered order runs (NOTE [Lowered send
// and recv order] in core/pipeline/pipeline_lowering.h). Random layer counts, splits and
// microbatch counts play without protocol problems (a deadlock, an unmatched send, a race, a
// microbatch still awaiting its W at the step's end), with or without checkpointed blocks
// (NOTE [Split backward of a checkpointed block] in core/model/autograd.cc), and only the stage
// boundaries between ranks carry transfers (the V schedules hand the middle boundary over on one
// rank).
RC_GTEST_PROP(SimPipelineProp, SplitBackwardSchedulesAtAnyPp, ()) {
  PipelineCase c;
  c.schedule = *rc::gen::element<std::string>("InterleavedZeroBubble", "ZBVZeroBubble",
                                              "DualPipeV");
  c.pp = *rc::gen::inRange(2, 5);
  c.shard = *rc::gen::element(1, 2);
  RC_PRE(c.pp * c.shard <= 8);
  const int stages_per_rank = c.schedule == "InterleavedZeroBubble" ? *rc::gen::inRange(1, 3) : 2;
  const int stages = c.pp * stages_per_rank;
  c.layers = *rc::gen::inRange(std::max(1, stages - 2), stages + 3);
  c.microbatches = *rc::gen::inRange(c.pp, 2 * stages + 1);
  c.steps = 2;
  c.seq = 64;
  if (*rc::gen::arbitrary<bool>()) c.split = random_split(c.layers, stages);
  const nlohmann::json ac = *rc::gen::element<nlohmann::json>(
      "none", "full", nlohmann::json{{"mode", "selective_layer"}, {"every", 2}});
  nlohmann::json j = testing::pipeline_scenario_json(c);
  j["training"]["activation_checkpointing"] = ac;
  Scenario s;
  try {
    s = parse_scenario(j);
  } catch (const InputError& e) {  // a shape PyTorch or torchtitan's split refuses
    RC_TAG("refused: " + e.where());
    return;
  }
  RC_TAG(c.schedule + " pp " + std::to_string(c.pp) + " ac " + ac.dump());
  const testing::PipelineRun run = testing::simulate_pipeline(s);
  RC_ASSERT(run.report.problems.empty());
  const PipelineScheduleOptions o = s.pipeline.schedule_options();
  const int m = o.microbatches, n = o.num_stages();
  for (int k = 0; k < c.pp; ++k) {
    std::map<std::string, int> want;
    for (int st : pipeline_rank_stages(o, k)) {
      if (st > 0 && pipeline_stage_rank(o, st - 1) != k) {
        want["F recv"] += m;
        want["B send"] += m;
      }
      if (st + 1 < n && pipeline_stage_rank(o, st + 1) != k) {
        want["F send"] += m;
        want["B recv"] += m;
      }
    }
    RC_ASSERT(run.transfers[static_cast<size_t>(k)] == want);
  }
}

}  // namespace
}  // namespace fullshard
