// The zero-bubble schedules' split backward over checkpointed blocks on the CPU backend (ranks as
// threads; NOTE [Split backward of a checkpointed block] in core/model/autograd.cc): random
// schedules (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV), activation checkpointing modes
// (full, layer-level selective), layer counts, microbatch sizes and counts and sequence lengths
// on pp 2 x FSDP 2. Every rank's measured peaks equal the simulator's to the byte, and the losses
// equal the same model's without pp (gradient accumulation over the same microbatches, the same
// checkpointing) within NOTE [Pipeline loss tolerance] (tests/unit/cpu_pipeline_test.cc): W's
// weight gradients, computed from the block recomputed at W, are the ones a full backward gets.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <fstream>

#include "simulator/simulate.h"
#include "tests/support/cpu_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

RC_GTEST_PROP(CpuPipelineAcProp, SplitBackwardOverCheckpointedBlocks, ()) {
  std::ifstream f(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/tiny-llama-pp2-fsdp2-cpu4.json");
  json j = json::parse(f);
  const std::string schedule =
      *rc::gen::element<std::string>("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV");
  const json ac = *rc::gen::element<json>("full", json{{"mode", "selective_layer"}, {"every", 1}},
                                          json{{"mode", "selective_layer"}, {"every", 2}});
  const int layers = *rc::gen::inRange(2, 5);
  const int mbs = *rc::gen::element(1, 2), microbatches = *rc::gen::element(2, 4, 8);
  const int steps = 3;
  j["model"] = {{"name", "tiny-llama"}, {"n_layers", layers}};
  j["pipeline_parallel"] = {{"schedule", schedule}, {"microbatch_size", mbs}};
  j["training"]["batch_per_rank"] = mbs * microbatches;
  j["training"]["seq_len"] = *rc::gen::inRange(4, 33);
  j["training"]["steps"] = steps;
  j["training"]["activation_checkpointing"] = ac;
  Scenario s;
  try {
    s = parse_scenario(j);
  } catch (const InputError& e) {  // a shape PyTorch refuses (microbatches vs stages)
    RC_DISCARD(std::string("refused: ") + e.what());
  }
  RC_TAG(schedule + " " + ac.dump());

  const RealRun real = run_real(s, steps);
  sim::SimulateOptions all;
  all.all_ranks = true;
  const sim::SimulationReport pred = sim::simulate_scenario(s, all);
  RC_ASSERT(pred.problems.empty());
  for (const auto& c : pred.classes)
    for (int r : c.ranks) {
      RC_ASSERT(real.ranks[static_cast<size_t>(r)].report.peak_allocated_bytes ==
                c.peak_allocated_bytes);
      RC_ASSERT(real.ranks[static_cast<size_t>(r)].report.peak_reserved_bytes ==
                c.peak_reserved_bytes);
    }

  // The same model without pp, as tests/unit/cpu_pipeline_test.cc's unsplit run.
  json ref = j;
  ref.erase("pipeline_parallel");
  ref["fsdp"]["mesh"] = {{"shape", {2}}};
  ref["training"]["batch_per_rank"] = mbs;
  ref["training"]["grad_accum_steps"] = microbatches;
  ref["hardware"]["gpus_per_node"] = 2;
  const RealRun unsplit = run_real(parse_scenario(ref), steps);
  RC_ASSERT(real.mean_loss.size() == static_cast<size_t>(steps));
  for (int k = 0; k < steps; ++k)
    RC_ASSERT(std::abs(real.mean_loss[static_cast<size_t>(k)] -
                       unsplit.mean_loss[static_cast<size_t>(k)]) < 1e-4);
}
