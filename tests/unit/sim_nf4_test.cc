// QLoRA's NF4 base weights in the simulator (NOTE [NF4 all-gather] in core/fsdp/fsdp_param.cc):
// FSDP2 all-gathers the NF4 parts, not bf16, and keeps exactly their bytes sharded; each NF4
// linear dequantises its weight in forward and backward; what NF4 does not compose with is
// refused naming training.frozen_dtype.
#include <gtest/gtest.h>

#include <string>

#include "core/scenario/lora_checks.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/tensor/nf4.h"
#include "core/train/training_program.h"
#include "simulator/engine/program.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using nlohmann::json;

namespace {

// tiny-llama LoRA on 2 CPU ranks (bf16 compute), the base in bf16 or NF4 (block 64, scaler
// block 16: the 32 x 64 projections then hold 2 factors, one per rank).
json qlora_json(bool nf4) {
  fullshard::testing::TinyOptions o;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = fullshard::testing::tiny_scenario_json(o);
  j["model"] = {
      {"name", "tiny-llama"},
      {"lora",
       {{"rank", 8},
        {"alpha", 16},
        {"target_modules",
         {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}}}};
  if (nf4) {
    j["training"]["frozen_dtype"] = "nf4";
    j["training"]["nf4"] = {{"block_size", 64}, {"scaler_block_size", 16}};
  }
  return j;
}

struct SimRun {
  std::vector<uint64_t> all_gather_bytes;  // the last step's, in issue order
  int dequantize = 0;                      // kNF4Dequantize launches in the last step
  sim::SimulationReport report;
};

SimRun run(const json& j) {
  SimRun s;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& r) {
    const auto& prog = r.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs) {
      if (in.step != last) continue;
      if (in.type == sim::InstrType::kCollective && in.coll == CollectiveKind::kAllGather)
        s.all_gather_bytes.push_back(in.coll_bytes);
      if (in.type != sim::InstrType::kCollective && in.op == OpKind::kNF4Dequantize) ++s.dequantize;
    }
  };
  s.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(s.report.ok()) << fullshard::testing::problems_text(s.report);
  return s;
}

uint64_t rounded(uint64_t bytes) { return (bytes + 511) / 512 * 512; }
uint64_t nf4_bytes(int64_t n) {
  const Nf4Layout l{n, 64, 16};
  return l.data_bytes() + l.scalers_bytes() + l.factors_bytes();
}

}  // namespace

TEST(Nf4Fsdp, AllGathersTheNf4PartsNotBf16) {
  const SimRun bf16 = run(qlora_json(false));
  const SimRun nf4 = run(qlora_json(true));
  ASSERT_EQ(nf4.all_gather_bytes.size(), bf16.all_gather_bytes.size());
  // A block's linears (wq, wk, wv, wo, w1, w2, w3) go from 2 bytes an element to their NF4
  // parts; the norms and the adapters' bf16 copies are unchanged. Padding-free over 2 ranks.
  const int64_t linears[] = {64 * 64, 32 * 64, 32 * 64, 64 * 64, 128 * 64, 64 * 128, 128 * 64};
  uint64_t saved = 0;
  for (int64_t n : linears) saved += 2 * static_cast<uint64_t>(n) - nf4_bytes(n);
  // Forward and backward all-gather each block; the root (embedding, norm, output: bf16 as in
  // torchtune) is unchanged.
  int blocks = 0;
  for (size_t i = 0; i < nf4.all_gather_bytes.size(); ++i) {
    const uint64_t d = bf16.all_gather_bytes[i] - nf4.all_gather_bytes[i];
    if (d == saved)
      ++blocks;
    else
      EXPECT_EQ(d, 0u) << i;
  }
  EXPECT_EQ(blocks, 4);  // 2 blocks, forward and backward
  // 14 NF4 linears dequantised in forward; in backward again for grad_input, except block 0's
  // wq, wk and wv, whose input (the frozen embedding's, through a frozen norm) needs no grad.
  EXPECT_EQ(nf4.dequantize, 14 + 11);
}

TEST(Nf4Fsdp, KeepsExactlyTheNf4ShardsBetweenSteps) {
  const json j = qlora_json(true);
  const Scenario s = parse_scenario(j);
  Transformer model(s.model);
  freeze_parameters(model.root(), s.training.frozen, true, frozen_dtype(s), s.training.nf4);
  uint64_t want = 0;
  int nf4 = 0;
  model.root().for_each_param([&](Param& p) {
    const int64_t n = numel(p.shape);
    if (p.nf4()) {  // three chunks, then scaler_mean and the table: 5 blocks
      ++nf4;
      const Nf4Layout l{n, 64, 16};
      want += rounded(l.data_bytes() / 2) + rounded(l.scalers_bytes() / 2) +
              rounded(l.factors_bytes() / 2) + 512 + 512;
      return;
    }
    want += rounded(static_cast<uint64_t>(n / 2) * dtype_size(p.dtype));
    if (p.requires_grad) want += 2 * rounded(static_cast<uint64_t>(n / 2) * 4);  // exp_avg(_sq)
  });
  EXPECT_EQ(nf4, 14);  // 7 per block; the output projection stays bf16
  const sim::SimulationReport r = run(j).report;
  EXPECT_EQ(r.classes.front().end_allocated_bytes, want);
  EXPECT_LT(want, run(qlora_json(false)).report.classes.front().end_allocated_bytes);
}

TEST(Nf4Fsdp, RefusesWhatItDoesNotComposeWith) {
  auto err = [](json j) { return fullshard::testing::input_error_of([&] { parse_scenario(j); }); };
  json j = qlora_json(true);
  j["training"].erase("nf4");  // torchao's 64 x 256: wq's 4096 elements are not whole blocks
  EXPECT_NE(err(j).find("training.frozen_dtype: is \"nf4\" but layers.0.attention.wq.weight has "
                        "4096 elements, not a multiple of 64 x 256"),
            std::string::npos)
      << err(j);
  j = qlora_json(true);
  j["training"]["nf4"]["scaler_block_size"] = 32;  // one factor for wk: cannot split over 2
  EXPECT_NE(err(j).find("does not split evenly over the 2 shard ranks"), std::string::npos)
      << err(j);
  j = qlora_json(true);
  j["fsdp"]["mixed_precision"]["param_dtype"] = "fp32";
  EXPECT_NE(err(j).find("training.frozen_dtype: is \"nf4\" with fsdp.mixed_precision.param_dtype"),
            std::string::npos)
      << err(j);
  j = qlora_json(true);
  j["fsdp"]["reshard_after_forward"] = 1;
  EXPECT_NE(err(j).find("an int reshard_after_forward"), std::string::npos) << err(j);
  j = qlora_json(false);
  j["training"]["nf4"] = {{"block_size", 64}};
  EXPECT_NE(err(j).find("training.nf4: is set but training.frozen_dtype is not \"nf4\""),
            std::string::npos)
      << err(j);
  j = qlora_json(true);
  j["training"]["nf4"]["block_size"] = 63;
  EXPECT_NE(err(j).find("training.nf4.block_size: is 63, odd"), std::string::npos) << err(j);
}
