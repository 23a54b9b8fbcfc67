// Mixture-of-experts layers inside pipeline stages on the CPU backend (ranks as threads; NOTE
// [MoE in pipeline stages] in core/train/pipeline_program.cc), over random schedules (the
// zero-bubble ones' split backward included), expert counts, top-k, ep degrees, receive
// buffers, capacity factors, the expert bias and groups, activation checkpointing, microbatch
// sizes and counts and sequence lengths on pp 2 x FSDP 2: the
// simulator's peaks (and MoE breakdown at the peak) equal the measured ones on every rank, the
// run's own routing replayed where it sizes the all-to-all buffers (tests/support/
// prop_support.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fstream>

#include "core/scenario/moe_checks.h"
#include "tests/support/prop_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

RC_GTEST_PROP(CpuPipelineMoeProp, PredictedPeaksEqualMeasuredOverRandomShapes, ()) {
  std::ifstream f(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/tiny-moe-pp2-cpu4.json");
  json j = json::parse(f);
  const std::string schedule = *rc::gen::element<std::string>(
      "1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble",
      "DualPipeV");
  const int ep = *rc::gen::element(1, 2);
  const int mbs = *rc::gen::element(1, 2), microbatches = *rc::gen::element(2, 4);
  j["pipeline_parallel"] = {{"schedule", schedule}, {"microbatch_size", mbs}};
  j["training"]["batch_per_rank"] = mbs * microbatches;
  j["training"]["seq_len"] = *rc::gen::inRange(2, 17);
  j["training"]["steps"] = 2;
  // The zero-bubble schedules recompute a checkpointed block at I and at each W (NOTE [Split
  // backward of a checkpointed block] in core/model/autograd.cc), its all-to-alls included.
  j["training"]["activation_checkpointing"] =
      *rc::gen::element<json>("none", "full", json{{"mode", "selective_layer"}, {"every", 2}});
  if (ep == 1) {
    j.erase("expert_parallel");
  } else {
    j["expert_parallel"] = {{"degree", 2},
                            {"receive_buffers", *rc::gen::element<std::string>("routed", "max")}};
  }
  Scenario s;
  try {
    s = parse_scenario(j);
  } catch (const InputError& e) {
    RC_DISCARD(std::string("refused: ") + e.what());
  }
  MoeConfig& m = s.model.moe;
  m.num_experts = ep > 1 ? *rc::gen::element(2, 4) : *rc::gen::inRange(1, 5);
  m.top_k = *rc::gen::inRange(1, static_cast<int>(m.num_experts) + 1);
  m.capacity_factor = *rc::gen::element(0.0, 1.0);
  // DeepSeek-V3's expert bias (NOTE [Expert bias] in core/model/expert_bias.h): every stage's
  // MoE layers updated once per step, over the data-parallel ranks of the stage.
  const bool bias = *rc::gen::arbitrary<bool>();
  if (bias) {
    m.load_balance = MoeLoadBalance::kExpertBias;
    m.load_balance_coeff = 1e-3;
  }
  if (m.num_experts == 4 && m.top_k <= 2 && *rc::gen::arbitrary<bool>()) {
    m.num_expert_groups = 2;
    m.num_limited_groups = 1;
  }
  check_expert_parallel(s);
  RC_TAG(schedule + " ep " + std::to_string(ep) + (bias ? " bias" : ""));
  predicted_peaks_equal_measured(s);
}
