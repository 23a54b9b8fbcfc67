// LoRA and frozen parameters trained for real on the CPU backend (ranks as threads over Gloo):
// only the trainable parameters change, sharded training equals unsharded, every init mode
// starts from the same values, checkpoints resume bit for bit, and the simulator's peaks equal
// the measured ones.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "core/scenario/lora_checks.h"
#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/export.h"
#include "core/data/param_init.h"
#include "core/model/lora.h"
#include "core/tensor/float_convert.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/sim_support.h"
#include "tests/support/temp_dir.h"
#include "runner/init_weights.h"

namespace fullshard {
namespace {
using namespace fullshard::testing;
using nlohmann::json;

// A small Llama (dim 8, kv width 4, ffn 12) on `mesh`, bf16 compute / fp32 reduce (the frozen
// base in bf16) unless `fp32`; NOTE [fp32 tolerance] (tests/property/cpu_training_prop_test.cc):
// eps 1e-6, lr 1e-3.
json scenario(std::vector<int> mesh, int batch, const json& lora, const json& frozen = nullptr,
              bool fp32 = false) {
  TinyOptions o;
  o.mesh = std::move(mesh);
  o.batch = batch;
  o.seq = 8;
  o.steps = 3;
  if (!fp32) o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = tiny_scenario_json(o);
  j["model"] = {{"arch", "llama"}, {"name", "lora"}, {"vocab_size", 256},
                {"dim", 8},        {"n_layers", 2},  {"n_heads", 2},
                {"n_kv_heads", 1}, {"ffn_dim", 12},  {"max_seq_len", 16}};
  if (!lora.is_null()) j["model"]["lora"] = lora;
  if (!frozen.is_null()) j["training"]["frozen"] = frozen;
  if (fp32 && (!lora.is_null() || !frozen.is_null())) j["training"]["frozen_dtype"] = "fp32";
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", 1.0}};
  j["training"]["seed"] = 11;
  return j;
}

const json kLora = {
    {"rank", 2},
    {"alpha", 4},
    {"target_modules",
     {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}};

// Every parameter's initial full tensor as the model's init draws it, rounded to its dtype.
std::map<std::string, std::vector<float>> initial_values(const Scenario& s) {
  Transformer model(s.model);
  set_init_seed(model.root(), s.training.seed);
  freeze_parameters(model.root(), s.training.frozen, s.model.lora.enabled(), frozen_dtype(s));
  std::map<std::string, std::vector<float>> out;
  model.root().for_each_param([&](Param& p) {
    std::vector<float> v(static_cast<size_t>(numel(p.shape)));
    const double spread = p.init == ParamInit::kUniform ? p.init_bound : p.init_std;
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = init_value(static_cast<int64_t>(p.init), spread, p.init_key, static_cast<int64_t>(i));
      if (p.dtype == DType::kBFloat16) v[i] = bf16_to_float(float_to_bf16(v[i]));
    }
    out[p.fqn] = std::move(v);
  });
  return out;
}

bool requires_grad(const Scenario& s, const std::string& fqn) {
  Transformer model(s.model);
  freeze_parameters(model.root(), s.training.frozen, s.model.lora.enabled(), frozen_dtype(s));
  bool rg = true;
  model.root().for_each_param([&](Param& p) {
    if (p.fqn == fqn) rg = p.requires_grad;
  });
  return rg;
}

// Training changes exactly the trainable parameters: every frozen one is bit-identical to its
// initial value after the steps, every trainable one moved.
void expect_only_trainable_change(const Scenario& s) {
  const RealRun run = run_real(s);
  const auto init = initial_values(s);
  int frozen = 0, trainable = 0;
  for (const auto& [fqn, v] : run.params) {
    const std::vector<float>& v0 = init.at(fqn);
    ASSERT_EQ(v.size(), v0.size()) << fqn;
    if (!requires_grad(s, fqn)) {
      ++frozen;
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], v0[i]) << fqn << "[" << i << "]";
    } else {
      ++trainable;
      EXPECT_NE(v, v0) << fqn << " did not train";
    }
  }
  EXPECT_GT(frozen, 0);
  EXPECT_GT(trainable, 0);
}

TEST(CpuLora, OnlyTheAdaptersChange) {
  expect_only_trainable_change(parse_scenario(scenario({2}, 2, kLora)));
}

// lora_B starts at zero, so the adapted model's first forward is the base model's: the same
// bf16 weights (fp32 ones cast by the all-gather, or kept in bf16), plus an exact zero.
TEST(CpuLora, StartsAsTheBaseModel) {
  const RealRun lora = run_real(parse_scenario(scenario({2}, 2, kLora)), 1);
  const RealRun base = run_real(parse_scenario(scenario({2}, 2, nullptr)), 1);
  ASSERT_EQ(lora.ranks.size(), base.ranks.size());
  for (size_t r = 0; r < lora.ranks.size(); ++r)
    EXPECT_EQ(lora.ranks[r].steps[0].loss, base.ranks[r].steps[0].loss) << "rank " << r;
}

TEST(CpuLora, OnlyTheUnfrozenParametersChange) {
  const Scenario s = parse_scenario(
      scenario({2}, 2, nullptr, {"tok_embeddings.weight", "layers.0.*", "*norm.weight"}, true));
  expect_only_trainable_change(s);
}

// A chunked loss whose hidden states need no grad (everything before the output frozen) still
// backpropagates each chunk into the output's weight.
TEST(CpuLora, ChunkedLossTrainsAnOutputBehindFrozenLayers) {
  json j = scenario({2}, 2, nullptr, {"tok_embeddings.weight", "layers.*", "norm.weight"}, true);
  j["model"]["implementation"] = {{"loss", "chunked"}, {"loss_chunks", 2}};
  const Scenario s = parse_scenario(j);
  expect_only_trainable_change(s);
  predicted_peaks_equal_measured(s);
}

TEST(CpuLora, EveryInitModeStartsFromTheSameValues) {
  // A bf16 frozen base: "device" and "broadcast_from_rank0" build its full tensors in bf16.
  json j = scenario({2}, 2, kLora);
  j["training"]["steps"] = 1;
  j["training"]["optimizer"]["lr"] = 0.0;  // the parameters stay their initial values
  std::map<std::string, std::vector<float>> first;
  for (const char* init : {"meta", "device", "broadcast_from_rank0"}) {
    j["training"]["init"] = init;
    const Scenario s = parse_scenario(j);
    const RealRun run = run_real(s);
    const auto want = initial_values(s);
    for (const auto& [fqn, v] : run.params) EXPECT_EQ(v, want.at(fqn)) << init << " " << fqn;
    predicted_peaks_equal_measured(s);
  }
}

TEST(CpuLora, ShardedEqualsUnsharded) {
  for (const std::vector<int>& mesh :
       {std::vector<int>{2}, std::vector<int>{3}, std::vector<int>{2, 2}}) {
    int world = 1;
    for (int d : mesh) world *= d;
    // fp32 throughout (NOTE [fp32 tolerance]); the frozen base fp32 as well.
    const json j = scenario(mesh, 1, kLora, nullptr, true);
    const RealRun a = run_real(parse_scenario(j));
    const RealRun b = run_real(parse_scenario(unsharded_job(j, world)));
    std::string where;
    EXPECT_LE(max_violation(a, b, 1e-5, 1e-3, &where), 1.0) << where;
    for (size_t k = 0; k < b.mean_loss.size(); ++k)
      EXPECT_NEAR(a.mean_loss[k], b.mean_loss[k], 1e-4);
  }
}

TEST(CpuLora, ResumeContinuesBitIdentically) {
  TempDir d;
  json j = scenario({2}, 2, kLora);
  j["training"]["steps"] = 4;
  const Scenario s = parse_scenario(j);
  const RealRun straight = run_real(s, 4);
  run_real(s, 2, saving(d.path(), 2));
  const RealRun resumed = run_real(s, 4, resuming(d.path()));
  ASSERT_EQ(resumed.mean_loss.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(resumed.mean_loss[k], straight.mean_loss[2 + k]);
  expect_bit_identical(resumed, straight);
}

// Fine-tuning from pretrained weights: a base trained and exported (fp32, Hugging Face names),
// then loaded by `init_from` into the LoRA model: every base parameter is the file's value
// rounded once to bf16, every adapter keeps PEFT's init (not in the file); a LoRA checkpoint
// exports its adapters under PEFT's names.
TEST(CpuLora, InitFromPretrainedWeightsLoadsTheFrozenBase) {
  TempDir d;
  const json base = scenario({2}, 2, nullptr, nullptr, true);
  const RealRun trained = run_real(parse_scenario(base), 2, saving(d.path() + "/base", 2));
  CheckpointReader reader(resolve_checkpoint(d.path() + "/base", "--resume"));
  ExportOptions eo;
  eo.out = d.path() + "/model.safetensors";
  export_safetensors(reader, eo);
  const Scenario s = parse_scenario(scenario({2}, 2, kLora));
  runner::validate_init_weights(eo.out, s);
  const RealRun loaded = run_real(s, 0, init_from(eo.out));
  const auto init = initial_values(s);
  for (const auto& [fqn, v] : loaded.params) {
    if (fqn.find(".lora_") != std::string::npos) {
      EXPECT_EQ(v, init.at(fqn)) << fqn;
      continue;
    }
    const std::vector<float>& want = trained.params.at(fqn);
    ASSERT_EQ(v.size(), want.size()) << fqn;
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(v[i], bf16_to_float(float_to_bf16(want[i]))) << fqn << "[" << i << "]";
  }
  // The LoRA run's own checkpoint: the adapters under PEFT's names beside the base's.
  TempDir e;
  run_real(s, 1, saving(e.path(), 1));
  CheckpointReader lora_reader(resolve_checkpoint(e.path(), "--resume"));
  ExportOptions lo;
  lo.out = e.path() + "/adapted.safetensors";
  export_safetensors(lora_reader, lo);
  const std::string bytes = file_bytes(lo.out);
  EXPECT_NE(bytes.find("model.layers.0.self_attn.q_proj.lora_A.weight"), std::string::npos);
  EXPECT_NE(bytes.find("model.layers.1.mlp.down_proj.lora_B.weight"), std::string::npos);
  EXPECT_NE(bytes.find("model.layers.1.mlp.down_proj.weight"), std::string::npos);
}

TEST(CpuLora, PredictedPeakMemoryEqualsMeasured) {
  for (const char* ac : {"none", "full", "selective_op"}) {
    json j = scenario({2}, 2, kLora);
    j["training"]["activation_checkpointing"] = ac;
    predicted_peaks_equal_measured(parse_scenario(j));
  }
}

// QLoRA's NF4 base (docs/qlora.md), blocks of 2 and one scaler per factor so that the small
// model's weights split over 2 ranks: the sharded run all-gathers back exactly the chunks the
// unsharded run quantised whole (the same dequantised base), so it matches the unsharded run
// within bf16 compute's tolerance (NOTE [bf16 originals tolerance]'s lr, eps and bounds); and
// predicted == measured peaks, with the recompute under full AC dequantising again.
json nf4_scenario(std::vector<int> mesh) {
  json j = scenario(std::move(mesh), 2, kLora);
  j["training"]["frozen_dtype"] = "nf4";
  j["training"]["nf4"] = {{"block_size", 2}, {"scaler_block_size", 1}};
  return j;
}

TEST(CpuLora, Nf4ShardedEqualsUnsharded) {
  json j = nf4_scenario({2});
  j["training"]["optimizer"]["lr"] = 1e-2;
  j["training"]["optimizer"]["eps"] = 0.1;
  const RealRun a = run_real(parse_scenario(j));
  const RealRun b = run_real(parse_scenario(unsharded_job(j, 2)));
  std::string where;
  EXPECT_LE(max_violation(a, b, 2e-4, 1.0 / 128, &where), 1.0) << where;
  for (size_t k = 0; k < b.mean_loss.size(); ++k) EXPECT_NEAR(a.mean_loss[k], b.mean_loss[k], 2e-3);
}

TEST(CpuLora, Nf4PredictedPeakMemoryEqualsMeasured) {
  for (const char* ac : {"none", "full"}) {
    json j = nf4_scenario({2});
    j["training"]["activation_checkpointing"] = ac;
    predicted_peaks_equal_measured(parse_scenario(j));
  }
}

}  // namespace
}  // namespace fullshard
