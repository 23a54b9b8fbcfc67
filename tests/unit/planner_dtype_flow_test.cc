// NOTE [Candidate dtype flow] (planner.cc): the planner leaves out the precisions under which a
// scenario's per-unit mixed precision would make a unit compute on activations of another
// dtype, a program PyTorch refuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/planner/planner.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

PlanOptions options(const json& per_unit) {
  json j = {{"model", {{"name", "tiny-llama"}, {"n_layers", 3}}},
            {"training", {{"seq_len", 64}, {"steps", 2}}},
            {"fsdp", {{"per_unit", per_unit}}},
            {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", 2}}}};
  PlanOptions o;
  o.base = parse_scenario(j);
  o.space.gpus = 2;
  o.space.gpus_per_node = 2;
  o.space.n_layers = 3;
  o.space.micro_batches = {1};
  o.space.tp_degrees = {1};
  return o;
}

// The last block computes in fp32 and returns fp32 activations, on which the root's norm and
// output (no cast of their own) compute in the candidate's dtype: only fp32 candidates run it.
TEST(PlannerDtypeFlow, PrecisionsThatBreakThePerUnitFlowAreLeftOut) {
  const PlanResult r =
      plan(options({{"layers.2", {{"mixed_precision", {{"param_dtype", "fp32"}}}}}}));
  ASSERT_FALSE(r.configs.empty());
  for (const auto& c : r.configs)
    EXPECT_EQ(c.candidate.precision, Precision::kFp32) << candidate_text(c.candidate);
  // A middle block in fp32: the next block casts its inputs to its own param_dtype (FSDP2's
  // default cast_forward_inputs), so every precision runs.
  const PlanResult all =
      plan(options({{"layers.1", {{"mixed_precision", {{"param_dtype", "fp32"}}}}}}));
  bool bf16 = false;
  for (const auto& c : all.configs) bf16 |= c.candidate.precision != Precision::kFp32;
  EXPECT_TRUE(bf16);
  EXPECT_GT(all.evaluated, r.evaluated);
}

}  // namespace
}  // namespace fullshard::planner
