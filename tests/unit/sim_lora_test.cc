// Frozen parameters and LoRA in the simulator (NOTE [Frozen parameters] in core/model/lora.cc):
// which parameters train, what FSDP2 reduce-scatters, and the memory that freezing saves, to the
// byte against the shard layout.
#include <gtest/gtest.h>

#include <string>

#include "core/scenario/lora_checks.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/train/training_program.h"
#include "simulator/engine/program.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using nlohmann::json;

namespace {

const json kAllTargets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                          "gate_proj", "up_proj", "down_proj"};

// tiny-llama on 2 CPU ranks, bf16 compute / fp32 reduce, optionally with LoRA and frozen params.
json lora_json(const json& lora, const json& frozen = nullptr, const json& frozen_dtype = nullptr) {
  fullshard::testing::TinyOptions o;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = fullshard::testing::tiny_scenario_json(o);
  j["model"] = {{"name", "tiny-llama"}};
  if (!lora.is_null()) j["model"]["lora"] = lora;
  if (!frozen.is_null()) j["training"]["frozen"] = frozen;
  if (!frozen_dtype.is_null()) j["training"]["frozen_dtype"] = frozen_dtype;
  return j;
}

struct LastStep {
  std::vector<uint64_t> reduce_scatter_bytes;  // the last step's, in issue order
  std::vector<uint64_t> all_gather_bytes;
  sim::SimulationReport report;
};

LastStep run(const json& j) {
  LastStep s;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs) {
      if (in.step != last || in.type != sim::InstrType::kCollective) continue;
      if (in.coll == CollectiveKind::kReduceScatter)
        s.reduce_scatter_bytes.push_back(in.coll_bytes);
      if (in.coll == CollectiveKind::kAllGather) s.all_gather_bytes.push_back(in.coll_bytes);
    }
  };
  s.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(s.report.ok()) << fullshard::testing::problems_text(s.report);
  return s;
}

uint64_t rounded(uint64_t bytes) { return bytes == 0 ? 0 : (bytes + 511) / 512 * 512; }

// What rank 0 holds between steps: each parameter's padded shard in its dtype, and AdamW's
// exp_avg and exp_avg_sq (fp32, the unpadded shard) for each trainable one; each a block of its
// own (rounded to 512 B).
uint64_t resident_bytes(const Scenario& s) {
  Transformer model(s.model);
  freeze_parameters(model.root(), s.training.frozen, s.model.lora.enabled(), frozen_dtype(s));
  const int world = s.fsdp.fsdp_shard_size();
  uint64_t n = 0;
  model.root().for_each_param([&](Param& p) {
    n += rounded(static_cast<uint64_t>(padded_sharded_numel(p.shape, world)) * dtype_size(p.dtype));
    if (p.requires_grad)
      n += 2 * rounded(static_cast<uint64_t>(numel(sharded_shape(p.shape, world, 0))) * 4);
  });
  return n;
}

}  // namespace

TEST(Lora, AdaptersAreTheOnlyTrainableParameters) {
  const Scenario s =
      parse_scenario(lora_json({{"rank", 8}, {"alpha", 16}, {"target_modules", kAllTargets}}));
  Transformer model(s.model);
  const int frozen = freeze_parameters(model.root(), s.training.frozen, true, DType::kBFloat16);
  int adapters = 0, total = 0;
  model.root().for_each_param([&](Param& p) {
    ++total;
    const bool adapter = p.fqn.find(".lora_") != std::string::npos;
    adapters += adapter;
    EXPECT_EQ(p.requires_grad, adapter) << p.fqn;
    EXPECT_EQ(p.dtype, adapter ? DType::kFloat32 : DType::kBFloat16) << p.fqn;
  });
  EXPECT_EQ(adapters, 2 * 7 * 2);  // 2 blocks x 7 linears x (A, B)
  EXPECT_EQ(frozen, total - adapters);
  // PEFT's shapes and init: A [r, in] kaiming-uniform, B [out, r] zeros.
  Module& wq = model.root().child("layers").child("0").child("attention").child("wq");
  const Param& a = wq.child("lora_A").param("weight");
  const Param& b = wq.child("lora_B").param("weight");
  EXPECT_EQ(a.shape, (Shape{8, 64}));
  EXPECT_EQ(b.shape, (Shape{64, 8}));
  EXPECT_EQ(a.init, ParamInit::kUniform);
  EXPECT_DOUBLE_EQ(a.init_bound, 1.0 / 8.0);  // 1 / sqrt(in = 64)
  EXPECT_EQ(b.init, ParamInit::kZeros);
  const ParameterCounts c = count_parameters(s);
  EXPECT_EQ(c.trainable, c.adapters);
  // Per block: r x (in + out) over wq (64, 64), wk, wv (64, 32), wo (64, 64), w1, w3 (64, 128),
  // w2 (128, 64).
  EXPECT_EQ(c.adapters, 2 * 8 * (128 + 96 + 96 + 128 + 192 + 192 + 192));
}

TEST(Lora, FrozenParametersAreNeitherReducedNorOptimized) {
  const json lora = {{"rank", 8}, {"alpha", 16}, {"target_modules", kAllTargets}};
  const LastStep base = run(lora_json(nullptr));
  const LastStep l = run(lora_json(lora));
  // Without LoRA: the two blocks and the root reduce-scatter; with it the root (embedding, norm
  // and output, all frozen) has no gradient to reduce and each block reduces only its adapters.
  ASSERT_EQ(base.reduce_scatter_bytes.size(), 3u);
  ASSERT_EQ(l.reduce_scatter_bytes.size(), 2u);
  // A block's adapters, padded per parameter over 2 ranks, fp32 (reduce_dtype).
  const uint64_t adapters = 8 * (128 + 96 + 96 + 128 + 192 + 192 + 192);
  for (uint64_t b : l.reduce_scatter_bytes) EXPECT_EQ(b, adapters * 4);
  // Each unit still all-gathers every parameter (frozen ones with the adapters, all bf16).
  ASSERT_EQ(l.all_gather_bytes.size(), base.all_gather_bytes.size());
  EXPECT_GT(l.all_gather_bytes[1], base.all_gather_bytes[1]);  // a block: base + adapters
  // The memory between steps is exactly the shards in their dtypes plus AdamW's states of the
  // trainable ones (each a block of its own).
  for (const json& j :
       {lora_json(nullptr), lora_json(lora), lora_json(lora, nullptr, "fp32"),
        lora_json(nullptr, json{"tok_embeddings.weight", "layers.*.attention.w?.weight"}),
        lora_json(nullptr, json{"output.weight"}, "bf16")}) {
    const Scenario s = parse_scenario(j);
    const sim::SimulationReport r = run(j).report;
    EXPECT_EQ(r.classes.front().end_allocated_bytes, resident_bytes(s)) << j.dump();
  }
}

TEST(Lora, FreezingSavesWhatItShould) {
  const json lora = {{"rank", 8}, {"alpha", 16}, {"target_modules", kAllTargets}};
  const sim::SimulationReport base = run(lora_json(nullptr)).report;
  const sim::SimulationReport bf16 = run(lora_json(lora)).report;
  const sim::SimulationReport fp32 = run(lora_json(lora, nullptr, "fp32")).report;
  const Scenario s = parse_scenario(lora_json(lora));
  // The frozen base in bf16 instead of fp32: exactly its shards' halves (rounded per block).
  Transformer model(s.model);
  uint64_t saved = 0;
  model.root().for_each_param([&](Param& p) {
    if (p.fqn.find(".lora_") != std::string::npos) return;
    const uint64_t n = static_cast<uint64_t>(padded_sharded_numel(p.shape, 2));
    saved += rounded(n * 4) - rounded(n * 2);
  });
  EXPECT_EQ(fp32.classes.front().end_allocated_bytes - bf16.classes.front().end_allocated_bytes,
            saved);
  // And the whole run peaks lower than full fine-tuning: no base gradients or AdamW states.
  EXPECT_LT(bf16.classes.front().peak_allocated_bytes, base.classes.front().peak_allocated_bytes);
  EXPECT_GT(bf16.trainable_parameters, 0);
  EXPECT_EQ(bf16.trainable_parameters, bf16.lora_parameters);
  EXPECT_EQ(base.trainable_parameters, 0);  // no frozen parameter: not reported
}

TEST(Lora, ActivationCheckpointingAndEveryInitModeSimulate) {
  const json lora = {{"rank", 4}, {"alpha", 8}, {"target_modules", {"q_proj", "v_proj"}}};
  for (const char* ac : {"none", "full", "selective_op"})
    for (const char* init : {"meta", "device", "broadcast_from_rank0"}) {
      json j = lora_json(lora);
      j["training"]["activation_checkpointing"] = ac;
      j["training"]["init"] = init;
      const sim::SimulationReport r = run(j).report;
      EXPECT_TRUE(r.ok()) << ac << " " << init;
    }
  // "device" builds the frozen base in bf16 on the device (not in fp32): its start-up peak is
  // below the same run's with an fp32 base.
  json d16 = lora_json(lora), d32 = lora_json(lora, nullptr, "fp32");
  d16["training"]["init"] = d32["training"]["init"] = "device";
  EXPECT_LT(run(d16).report.classes.front().init_peak_allocated_bytes,
            run(d32).report.classes.front().init_peak_allocated_bytes);
}

TEST(Lora, ShippedScenariosSimulate) {
  for (const char* name : {"tiny-llama-lora-cpu2", "llama3.1-8b-lora-fsdp8-h100"}) {
    const Scenario s =
        load_scenario_file(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/" + name + ".json");
    const sim::SimulationReport r = sim::simulate_scenario(s, {});
    EXPECT_TRUE(r.ok()) << name << ": " << fullshard::testing::problems_text(r);
    EXPECT_GT(r.lora_parameters, 0) << name;
    EXPECT_EQ(r.trainable_parameters, r.lora_parameters) << name;
  }
}
