// Original parameters in bf16 (training.orig_dtype, NOTE [Original dtype] in
// core/fsdp/fsdp_param_group.cc) in the simulator: what FSDP2 casts, all-gathers and
// reduce-scatters, and the memory bf16 originals save, to the byte against the shard layout.
#include <gtest/gtest.h>

#include <string>

#include "core/fsdp/shard_layout.h"
#include "core/model/transformer.h"
#include "simulator/engine/program.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using nlohmann::json;

namespace {

// tiny-llama on 2 CPU ranks with `mp` as fsdp.mixed_precision and `orig` as training.orig_dtype.
json scenario(const std::string& orig, const json& mp) {
  fullshard::testing::TinyOptions o;
  o.mixed_precision = mp;
  json j = fullshard::testing::tiny_scenario_json(o);
  j["model"] = {{"name", "tiny-llama"}};
  if (!orig.empty()) j["training"]["orig_dtype"] = orig;
  return j;
}

const json kBf16 = {{"param_dtype", "bf16"}};
const json kBf16Fp32 = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};

struct Played {
  std::vector<DType> all_gather, reduce_scatter;  // the last step's collectives' dtypes
  int foreach_copies = 0;  // foreach-copy (cast) buffers allocated before all-gathers
  int grad_casts = 0;      // casts of reduced gradients back to the original dtype
  sim::SimulationReport report;
};

Played play(const json& j) {
  Played p;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const sim::Program& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const sim::Instr& in : prog.instrs) {
      if (in.step != last) continue;
      const std::string& name = prog.names[in.name];
      if (in.type == sim::InstrType::kCollective) {
        if (in.coll == CollectiveKind::kAllGather) p.all_gather.push_back(in.dtype);
        if (in.coll == CollectiveKind::kReduceScatter) p.reduce_scatter.push_back(in.dtype);
      }
      if (in.type == sim::InstrType::kAlloc && name.find("(foreach_copy)") != std::string::npos)
        ++p.foreach_copies;
      if (in.type == sim::InstrType::kKernel && name.find(" grad cast") != std::string::npos)
        ++p.grad_casts;
    }
  };
  p.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.report.ok()) << fullshard::testing::problems_text(p.report);
  return p;
}

uint64_t rounded(uint64_t bytes) { return bytes == 0 ? 0 : (bytes + 511) / 512 * 512; }

}  // namespace

// FSDP2 clamps param_dtype == orig_dtype away: bf16 shards are the all-gather inputs as they are
// (no foreach-copy cast buffer), gradients come out bf16 and reduce-scatter in bf16 unless
// reduce_dtype is fp32, and then they are cast back to bf16.
TEST(OrigDtype, Bf16OriginalsAreNotCastBeforeTheAllGather) {
  const Played fp32 = play(scenario("", kBf16Fp32));
  // Every all-gather casts its unit's fp32 shards first; the fp32 reduce-scatter's output is
  // already in the original dtype.
  ASSERT_EQ(fp32.all_gather.size(), 5u);  // two blocks in forward and backward, the root once
  EXPECT_EQ(fp32.foreach_copies, 5);
  EXPECT_EQ(fp32.grad_casts, 0);
  const Played bf16 = play(scenario("bf16", kBf16));
  EXPECT_EQ(bf16.foreach_copies, 0);
  EXPECT_EQ(bf16.grad_casts, 0);
  for (DType d : bf16.all_gather) EXPECT_EQ(d, DType::kBFloat16);
  ASSERT_EQ(bf16.reduce_scatter.size(), 3u);
  for (DType d : bf16.reduce_scatter) EXPECT_EQ(d, DType::kBFloat16);
  // reduce_dtype fp32: the reduce-scatter widens, and the result is cast back to bf16.
  const Played wide = play(scenario("bf16", kBf16Fp32));
  EXPECT_EQ(wide.foreach_copies, 0);
  for (DType d : wide.reduce_scatter) EXPECT_EQ(d, DType::kFloat32);
  EXPECT_EQ(wide.grad_casts, 3);
  // param_dtype fp32 over bf16 originals: the all-gather upcasts (a foreach copy per unit),
  // compute and the reduce-scatter are fp32, the gradients go back to bf16.
  const Played up = play(scenario("bf16", {{"param_dtype", "fp32"}}));
  EXPECT_EQ(up.foreach_copies, 5);
  for (DType d : up.all_gather) EXPECT_EQ(d, DType::kFloat32);
  for (DType d : up.reduce_scatter) EXPECT_EQ(d, DType::kFloat32);
  EXPECT_EQ(up.grad_casts, 3);
}

// Between steps a rank holds each parameter's padded shard and AdamW's exp_avg and exp_avg_sq
// (zeros_like the unpadded shard), each a block of its own: bf16 originals halve all three.
TEST(OrigDtype, Bf16OriginalsHalveShardsAndOptimizerState) {
  const Scenario s = parse_scenario(scenario("bf16", kBf16));
  Transformer model(s.model);
  uint64_t fp32 = 0, bf16 = 0;
  model.root().for_each_param([&](Param& p) {
    const auto padded = static_cast<uint64_t>(padded_sharded_numel(p.shape, 2));
    const auto local = static_cast<uint64_t>(numel(sharded_shape(p.shape, 2, 0)));
    fp32 += rounded(padded * 4) + 2 * rounded(local * 4);
    bf16 += rounded(padded * 2) + 2 * rounded(local * 2);
  });
  const Played a = play(scenario("", kBf16Fp32));
  const Played b = play(scenario("bf16", kBf16));
  EXPECT_EQ(a.report.classes.front().end_allocated_bytes, fp32);
  EXPECT_EQ(b.report.classes.front().end_allocated_bytes, bf16);
  EXPECT_LT(b.report.classes.front().peak_allocated_bytes,
            a.report.classes.front().peak_allocated_bytes);
}

TEST(OrigDtype, RefusedWhereNotBuilt) {
  using fullshard::testing::input_error_of;
  json fp16 = scenario("bf16", kBf16);
  fp16["training"]["orig_dtype"] = "fp16";
  EXPECT_NE(input_error_of([&] { parse_scenario(fp16); }).find("training.orig_dtype"),
            std::string::npos);
  json tp = scenario("bf16", kBf16);
  tp["fsdp"]["mesh"] = {{"shape", {1, 2}}, {"dim_names", {"shard", "tp"}}};
  EXPECT_NE(input_error_of([&] {
              parse_scenario(tp);
            }).find("training.orig_dtype: is \"bf16\" with a tp mesh dim"),
            std::string::npos);
  // A frozen fp32 parameter beside bf16 originals all-gathers with them only through a common
  // param_dtype (the all-gather has one dtype).
  json frozen = scenario("bf16", json::object());
  frozen["training"]["frozen"] = {"output.weight"};
  frozen["training"]["frozen_dtype"] = "fp32";
  EXPECT_NE(input_error_of([&] { parse_scenario(frozen); })
                .find("training.frozen_dtype: is \"fp32\" but fsdp.mixed_precision.param_dtype "
                      "is unset (training.orig_dtype, bf16)"),
            std::string::npos);
  frozen["fsdp"]["mixed_precision"] = {{"param_dtype", "fp32"}};
  EXPECT_EQ(input_error_of([&] { parse_scenario(frozen); }), "");
}
