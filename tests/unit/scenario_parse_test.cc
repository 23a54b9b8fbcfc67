// The scenario format: shipped files parse, defaults, every accepted spelling, and one test
// per validation error asserting the JSON path, the bad value and the hint in the message.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/hardware_profile.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario.h"

namespace fullshard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = FULLSHARD_SOURCE_DIR;
const fs::path kFixtures = kSource / "tests/data/scenarios";

// The smallest valid scenario: 2 CPU ranks (the cpu profile's gpus_per_node) running tiny-llama.
json minimal() {
  return json::parse(R"({
    "model": "tiny-llama",
    "training": {"seq_len": 64},
    "hardware": {"profile": "cpu"}
  })");
}

// minimal() on 2 nodes of 8 H100s: a 16-rank world for mesh tests.
json h100x16() {
  json j = minimal();
  j["hardware"] = {{"profile", "h100-sxm-80gb"}, {"nodes", 2}, {"gpus_per_node", 8}};
  return j;
}

Scenario parse(const json& j) { return parse_scenario(j, kFixtures.string()); }

// Asserts that `fn` throws an InputError whose where() is `where`, whose message is one line
// and contains the path and every substring.
template <typename Fn>
void expect_input_error(Fn fn, const std::string& where, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError at " << where;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.where(), where) << what;
    EXPECT_NE(what.find(where), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "missing '" << p << "' in: " << what;
  }
}

void expect_error(const json& j, const std::string& where, const std::vector<std::string>& parts) {
  expect_input_error([&] { parse(j); }, where, parts);
}

// ---------------------------------------------------------------- shipped files

std::vector<fs::path> shipped_scenarios() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kSource / "scenarios"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ScenarioShipped, EveryScenarioFileParses) {
  const auto files = shipped_scenarios();
  ASSERT_GE(files.size(), 6u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario_file(f.string()));
    EXPECT_EQ(s.name, f.stem().string());
    EXPECT_GE(s.training.steps,
              2);  // the last step is a steady one (the first allocates the optimizer states)
    int ranks = 1;
    for (int d : s.fsdp.mesh_shape) ranks *= d;
    EXPECT_EQ(ranks, s.world_size());
    EXPECT_FALSE(s.description.empty());
    EXPECT_EQ(s.hardware.allocator.capacity_bytes,
              s.hardware.device.memory_bytes - s.hardware.device.non_allocator_bytes);
  }
}

TEST(ScenarioShipped, Llama8bOnOneNode) {
  const Scenario s =
      load_scenario_file((kSource / "scenarios/llama3.1-8b-fsdp8-h100.json").string());
  EXPECT_EQ(s.model.name, "llama3.1-8b");
  EXPECT_EQ(s.world_size(), 8);
  EXPECT_EQ(s.fsdp.mesh_shape, std::vector<int>{8});
  EXPECT_EQ(s.fsdp.mixed_precision.param_dtype, DType::kBFloat16);
  EXPECT_EQ(s.fsdp.mixed_precision.reduce_dtype, DType::kFloat32);
  EXPECT_EQ(s.fsdp.reshard_after_forward.kind, ReshardAfterForward::Kind::kDefault);
  EXPECT_EQ(s.training.activation_checkpointing.mode, RecomputeMode::kFull);
  EXPECT_EQ(s.training.seq_len, 8192);
  EXPECT_EQ(s.hardware.device.name, "h100-sxm-80gb");
}

TEST(ScenarioShipped, Llama70bHsdp) {
  const Scenario s =
      load_scenario_file((kSource / "scenarios/llama3.1-70b-hsdp8x128-h100.json").string());
  EXPECT_EQ(s.world_size(), 1024);
  EXPECT_EQ(s.fsdp.mesh_shape, (std::vector<int>{8, 128}));
  EXPECT_EQ(s.fsdp.mesh_dim_names, (std::vector<std::string>{"replicate", "shard"}));
}

TEST(ScenarioShipped, CpuScenariosUseTwoRanksInFp32) {
  for (const char* f : {"gpt2-124m-cpu2.json", "tiny-llama-cpu2.json"}) {
    const Scenario s = load_scenario_file((kSource / "scenarios" / f).string());
    EXPECT_EQ(s.world_size(), 2) << f;
    EXPECT_EQ(s.hardware.device.name, "cpu");
    EXPECT_FALSE(s.fsdp.mixed_precision.param_dtype.has_value());
  }
}

// ---------------------------------------------------------------- defaults and spellings

TEST(ScenarioDefaults, MinimalScenario) {
  const Scenario s = parse(minimal());
  EXPECT_EQ(s.name, "");
  EXPECT_EQ(s.model.name, "tiny-llama");
  const TrainingOptions& t = s.training;
  EXPECT_EQ(t.batch_per_rank, 1);
  EXPECT_EQ(t.seq_len, 64);
  EXPECT_EQ(t.steps, 1);
  EXPECT_EQ(t.grad_accum_steps, 1);
  EXPECT_EQ(t.activation_checkpointing.mode, RecomputeMode::kNone);
  EXPECT_EQ(t.seed, 0u);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(t.optimizer.beta2, 0.95);
  const FsdpOptions& f = s.fsdp;
  EXPECT_EQ(f.mesh_shape, std::vector<int>{2});
  EXPECT_EQ(f.mesh_dim_names, std::vector<std::string>{"shard"});
  EXPECT_EQ(f.reshard_after_forward.kind, ReshardAfterForward::Kind::kDefault);
  EXPECT_FALSE(f.mixed_precision.param_dtype || f.mixed_precision.reduce_dtype ||
               f.mixed_precision.output_dtype);
  EXPECT_TRUE(f.mixed_precision.cast_forward_inputs);
  EXPECT_FALSE(f.cpu_offload);
  EXPECT_TRUE(f.pin_memory);
  EXPECT_EQ(f.units, ShardingUnits::kBlocks);
  EXPECT_EQ(f.forward_prefetch, 0);
  EXPECT_EQ(f.backward_prefetch, 1);
  const HardwareOptions& h = s.hardware;
  EXPECT_EQ(h.nodes, 1);
  EXPECT_EQ(h.gpus_per_node, 2);  // from the cpu profile
  EXPECT_FALSE(h.memory_bytes.has_value());
  EXPECT_EQ(h.allocator.capacity_bytes, uint64_t{16} << 30);
  EXPECT_FALSE(h.allocator.expandable_segments);
  EXPECT_EQ(h.allocator.max_split_size_bytes, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s.world_size(), 2);
}

TEST(ScenarioDefaults, NameFromFileStemAndDefaultMeshIsWorld) {
  const Scenario s = load_scenario_file((kFixtures / "hf_config_directory.json").string());
  EXPECT_EQ(s.name, "hf_config_directory");
  EXPECT_EQ(s.fsdp.mesh_shape, std::vector<int>{16});
}

TEST(ScenarioDefaults, TwoDimMeshDefaultsToReplicateShard) {
  json j = h100x16();
  j["fsdp"]["mesh"] = {{"shape", {2, 8}}};
  const Scenario s = parse(j);
  EXPECT_EQ(s.fsdp.mesh_dim_names, (std::vector<std::string>{"replicate", "shard"}));
}

TEST(ScenarioModel, ZooOverridesInlineAndHfConfig) {
  json j = minimal();
  j["model"] = {{"name", "llama3.1-8b"}, {"n_layers", 2}};
  Scenario s = parse(j);
  EXPECT_EQ(s.model.n_layers, 2);
  EXPECT_EQ(s.model.dim, 4096);

  j["model"] = json::parse(R"({"arch": "llama", "vocab_size": 100, "dim": 32, "n_layers": 1,
                               "n_heads": 4, "ffn_dim": 64, "max_seq_len": 64})");
  s = parse(j);
  EXPECT_EQ(s.model.name, "custom");
  EXPECT_EQ(s.model.n_kv_heads, 4);  // MHA unless given

  j["model"] = json::parse(R"({"name": "my-gpt", "arch": "gpt2", "vocab_size": 100, "dim": 32,
                               "n_layers": 1, "n_heads": 4, "ffn_dim": 128, "max_seq_len": 64})");
  s = parse(j);
  EXPECT_EQ(s.model.name, "my-gpt");
  EXPECT_TRUE(s.model.tie_embeddings);
  EXPECT_TRUE(s.model.linear_bias);

  s = load_scenario_file((kFixtures / "hf_config_relative.json").string());
  EXPECT_EQ(s.model.dim, 4096);
  EXPECT_EQ(s.model.n_layers, 2);                      // override on top of the HF config
  EXPECT_EQ(s.hardware.device.name, "h100-sxm-80gb");  // via the "h100" alias
}

// model.weights: resolved against the scenario's folder; only its existence is checked here
// (the launcher checks every tensor, runner/init_weights.h).
TEST(ScenarioModel, WeightsPathRelativeToTheScenario) {
  json j = minimal();
  EXPECT_EQ(parse(j).model_weights, "");
  j["model"] = {{"name", "tiny-llama"}, {"weights", "hf/config.json"}};
  EXPECT_EQ(fs::path(parse(j).model_weights), kFixtures / "hf/config.json");
  const Scenario oracle =
      load_scenario_file((kSource / "tests/data/oracle/llama/scenario.json").string());
  EXPECT_EQ(fs::path(oracle.model_weights), kSource / "tests/data/oracle/llama/model.safetensors");
  j["model"]["weights"] = "missing.safetensors";
  expect_error(j, "model.weights",
               {"file not found", "missing.safetensors", "relative to the scenario"});
  j["model"]["weights"] = 3;
  expect_error(j, "model.weights", {"3"});
  j["model"]["weights"] = "";
  expect_error(j, "model.weights", {"file not found"});
}

TEST(ScenarioTraining, ActivationCheckpointingSpellings) {
  json j = minimal();
  const std::pair<json, RecomputeMode> cases[] = {
      {"none", RecomputeMode::kNone},
      {"full", RecomputeMode::kFull},
      {"selective_op", RecomputeMode::kSelectiveOp},
      {{{"mode", "full"}}, RecomputeMode::kFull},
      {{{"mode", "selective_layer"}, {"every", 3}}, RecomputeMode::kSelectiveLayer},
  };
  for (const auto& [v, mode] : cases) {
    j["training"]["activation_checkpointing"] = v;
    const Scenario s = parse(j);
    EXPECT_EQ(s.training.activation_checkpointing.mode, mode) << v;
    EXPECT_STREQ(recompute_mode_name(mode), v.is_string() ? v.get<std::string>().c_str()
                                                          : v["mode"].get<std::string>().c_str());
  }
  EXPECT_EQ(parse(j).training.activation_checkpointing.every, 3);
}

TEST(ScenarioTraining, OptimizerAndCounts) {
  json j = minimal();
  j["training"] = json::parse(R"({"seq_len": 32, "batch_per_rank": 4, "steps": 3,
      "grad_accum_steps": 2, "seed": 18446744073709551615,
      "optimizer": {"lr": 1e-3, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6,
                    "weight_decay": 0, "max_grad_norm": 0}})");
  const TrainingOptions t = parse(j).training;
  EXPECT_EQ(t.batch_per_rank, 4);
  EXPECT_EQ(t.grad_accum_steps, 2);
  EXPECT_EQ(t.seed, 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(t.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(t.optimizer.max_grad_norm, 0);
}

TEST(ScenarioFsdp, OptionSpellings) {
  json j = h100x16();
  j["fsdp"] = json::parse(R"({"mesh": {"shape": [2, 8], "dim_names": ["replicate", "shard"]},
      "reshard_after_forward": 4,
      "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32", "output_dtype": "fp16",
                          "cast_forward_inputs": false},
      "cpu_offload": {"pin_memory": false}, "units": "root",
      "forward_prefetch": 2, "backward_prefetch": 3})");
  const FsdpOptions f = parse(j).fsdp;
  EXPECT_EQ(f.reshard_after_forward.kind, ReshardAfterForward::Kind::kInt);
  EXPECT_EQ(f.reshard_after_forward.n, 4);
  EXPECT_EQ(f.mixed_precision.output_dtype, DType::kFloat16);
  EXPECT_FALSE(f.mixed_precision.cast_forward_inputs);
  EXPECT_TRUE(f.cpu_offload);
  EXPECT_FALSE(f.pin_memory);
  EXPECT_EQ(f.units, ShardingUnits::kRoot);
  EXPECT_STREQ(sharding_units_name(f.units), "root");
  EXPECT_EQ(f.forward_prefetch, 2);
  EXPECT_EQ(f.backward_prefetch, 3);
  // FSDP2 cannot turn backward prefetch off: 0 is rejected with the reason.
  json z = h100x16();
  z["fsdp"] = json::parse(R"({"backward_prefetch": 0})");
  try {
    parse(z);
    ADD_FAILURE() << "backward_prefetch 0 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.backward_prefetch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("always prefetches"), std::string::npos) << e.what();
  }

  using Kind = ReshardAfterForward::Kind;
  const std::vector<std::pair<json, Kind>> kinds = {
      {true, Kind::kTrue}, {false, Kind::kFalse}, {nullptr, Kind::kDefault}, {8, Kind::kInt}};
  for (const auto& [v, kind] : kinds) {
    j["fsdp"]["reshard_after_forward"] = v;
    EXPECT_EQ(parse(j).fsdp.reshard_after_forward.kind, kind) << v;
  }
  j["fsdp"]["cpu_offload"] = true;
  EXPECT_TRUE(parse(j).fsdp.cpu_offload);
  EXPECT_TRUE(parse(j).fsdp.pin_memory);
}

// FSDPModule.set_gradient_divide_factor / set_force_sum_reduction_for_comms, and the
// torchtitan preset's global-token loss that sets the factor to 1.0 when the scenario does not.
TEST(ScenarioFsdp, GradientDivision) {
  json j = h100x16();
  EXPECT_FALSE(parse(j).fsdp.gradient_divide_factor.has_value());
  EXPECT_FALSE(parse(j).fsdp.force_sum_reduction_for_comms);
  EXPECT_EQ(parse(j).model.implementation.loss_normalization, LossNormalization::kMean);
  j["fsdp"] =
      json::parse(R"({"gradient_divide_factor": 1.5, "force_sum_reduction_for_comms": true})");
  EXPECT_EQ(parse(j).fsdp.gradient_divide_factor, 1.5);
  EXPECT_TRUE(parse(j).fsdp.force_sum_reduction_for_comms);
  for (const json& bad : {json(0), json(-2.0), json("1")}) {
    j["fsdp"] = {{"gradient_divide_factor", bad}};
    expect_error(j, "fsdp.gradient_divide_factor", {});
  }
  j["fsdp"] = {{"force_sum_reduction_for_comms", 1}};
  expect_error(j, "fsdp.force_sum_reduction_for_comms", {});
  j.erase("fsdp");
  j["model"] = {{"name", "tiny-llama"}, {"implementation", "torchtitan"}};
  EXPECT_EQ(parse(j).model.implementation.loss_normalization,
            LossNormalization::kGlobalValidTokens);
  j["model"]["implementation"] = {{"preset", "torchtitan"}, {"loss_normalization", "mean"}};
  EXPECT_EQ(parse(j).model.implementation.loss_normalization, LossNormalization::kMean);
  j["model"]["implementation"] = {{"loss_normalization", "tokens"}};
  expect_error(j, "model.implementation.loss_normalization", {"global_valid_tokens"});
}

TEST(ScenarioHardware, OverridesAndAllocator) {
  json j = h100x16();
  j["hardware"]["memory_gib"] = 40;
  j["hardware"]["non_allocator_gib"] = 1.5;
  j["hardware"]["allocator"] = {{"expandable_segments", true}, {"max_split_size_mb", 512}};
  HardwareOptions h = parse(j).hardware;
  EXPECT_EQ(h.device.memory_bytes, uint64_t{40} << 30);
  EXPECT_EQ(h.device.non_allocator_bytes, uint64_t{3} << 29);
  EXPECT_EQ(h.allocator.capacity_bytes, (uint64_t{40} << 30) - (uint64_t{3} << 29));
  EXPECT_TRUE(h.allocator.expandable_segments);
  EXPECT_EQ(h.allocator.max_split_size_bytes, uint64_t{512} << 20);

  j = h100x16();
  j["hardware"]["memory_bytes"] = 10000000000;
  h = parse(j).hardware;
  EXPECT_EQ(h.memory_bytes, 10000000000u);
  const HardwareProfile p = load_hardware_profile("h100-sxm-80gb");
  EXPECT_EQ(h.allocator.capacity_bytes, 10000000000u - p.non_allocator_bytes);
}

TEST(ScenarioHardware, ProfileFileRelativeToScenario) {
  const Scenario s = load_scenario_file((kFixtures / "custom_profile.json").string());
  EXPECT_EQ(s.hardware.device.name, "tiny-gpu");
  EXPECT_EQ(s.world_size(), 8);
  EXPECT_EQ(s.hardware.allocator.capacity_bytes, (uint64_t{1} << 30) - (uint64_t{1} << 27));
}

// ---------------------------------------------------------------- hardware profiles

TEST(HardwareProfiles, ShippedProfilesLoadWithSources) {
  const auto names = list_hardware_profiles();
  for (const char* want : {"h100-sxm-80gb", "a100-80gb", "h200-141gb", "h100-96gb", "b200", "cpu"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  std::set<std::string> aliases;
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const HardwareProfile p = load_hardware_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_GT(p.memory_bytes, p.non_allocator_bytes);
    EXPECT_GT(p.peak_flops_bf16, 0);
    EXPECT_GT(p.hbm_bandwidth, 0);
    EXPECT_GE(p.gpus_per_node, 1);
    for (const char* figure :
         {"memory_bytes:", "non_allocator_bytes:", "peak_flops_bf16:", "hbm_bandwidth:",
          "nvlink_bandwidth:", "network_bandwidth:", "pcie_bandwidth:", "gpus_per_node:"})
      EXPECT_NE(p.source.find(figure), std::string::npos) << figure;
    for (const auto& a : p.aliases) EXPECT_TRUE(aliases.insert(a).second) << "alias twice: " << a;
  }
  EXPECT_EQ(load_hardware_profile("H100").name, "h100-sxm-80gb");  // alias, any case
  const HardwareProfile cpu = load_hardware_profile("cpu");
  EXPECT_EQ(cpu.memory_bytes, uint64_t{16} << 30);
  EXPECT_EQ(cpu.non_allocator_bytes, 0u);
  EXPECT_EQ(cpu.gpus_per_node, 2);
}

TEST(HardwareProfiles, DataDirFromEnvironment) {
  ASSERT_EQ(setenv("FULLSHARD_DATA_DIR", kFixtures.c_str(), 1), 0);
  const auto names = list_hardware_profiles();
  const auto tiny = find_hardware_profile("tiny-gpu");
  const auto h100 = find_hardware_profile("h100-sxm-80gb");
  unsetenv("FULLSHARD_DATA_DIR");
  EXPECT_EQ(names, (std::vector<std::string>{"tiny-gpu", "uncited-gpu"}));
  ASSERT_TRUE(tiny.has_value());
  EXPECT_EQ(tiny->gpus_per_node, 4);
  EXPECT_FALSE(h100.has_value());
  EXPECT_FALSE(find_hardware_profile("../hardware/h100-sxm-80gb").has_value());
}

TEST(HardwareProfiles, UncitedFigureIsAnError) {
  expect_input_error(
      [] { load_scenario_file((kFixtures / "uncited_profile.json").string()); },
      (kFixtures / "hardware/uncited-gpu.json").string() + ": sources.peak_flops_fp32",
      {"is missing", "cite"});
}

TEST(HardwareProfiles, UnknownProfileListsKnownOnes) {
  expect_input_error(
      [] { load_hardware_profile("h100x", "--hardware"); }, "--hardware",
      {"unknown hardware profile 'h100x'", "h100-sxm-80gb", "'h100' = 'h100-sxm-80gb'"});
}

// ---------------------------------------------------------------- errors: files

TEST(ScenarioErrors, MissingFile) {
  const std::string path = (kFixtures / "does-not-exist.json").string();
  expect_input_error([&] { load_scenario_file(path); }, path, {"file not found"});
}

TEST(ScenarioErrors, MalformedJsonReportsLineAndColumn) {
  const std::string path = (kFixtures / "malformed_trailing_comma.json").string();
  expect_input_error([&] { load_scenario_file(path); }, path + ":3:30",
                     {"malformed JSON", "unexpected '}'", "line 3, column 30"});
  const std::string path2 = (kFixtures / "malformed_missing_comma.json").string();
  expect_input_error([&] { load_scenario_file(path2); },
                     path2 + ":3:12",  // the end of the unexpected token
                     {"malformed JSON", "expected '}'"});
}

TEST(ScenarioErrors, DuplicateKey) {
  const std::string path = (kFixtures / "duplicate_key.json").string();
  expect_input_error([&] { load_scenario_file(path); }, path, {"'training.seq_len' appears twice"});
}

TEST(ScenarioErrors, MissingHfConfigFile) {
  json j = minimal();
  j["model"] = {{"hf_config", "nope/config.json"}};
  expect_error(j, "model.hf_config", {"file not found", "nope/config.json"});
}

// ---------------------------------------------------------------- errors: structure

TEST(ScenarioErrors, NotAnObjectAndMissingSections) {
  expect_error(json::array(), "scenario", {"is [] (an array), not a JSON object"});
  json j = minimal();
  j.erase("training");
  expect_error(j, "training", {"is missing", "seq_len"});
  j = minimal();
  j["training"].erase("seq_len");
  expect_error(j, "training.seq_len", {"is missing"});
  j = minimal();
  j["hardware"].erase("profile");
  expect_error(j, "hardware.profile", {"is missing", "h100-sxm-80gb"});
}

TEST(ScenarioErrors, MisspelledFieldSuggestsClosest) {
  json j = minimal();
  j["training"]["seq_lenn"] = 64;
  expect_error(j, "training.seq_lenn", {"unknown field 'seq_lenn'", "did you mean 'seq_len'?"});
  j = minimal();
  j["fsdp"]["reshard_after_froward"] = true;
  expect_error(j, "fsdp.reshard_after_froward", {"did you mean 'reshard_after_forward'?"});
  j = minimal();
  j["hardware"]["allocator"] = {{"expandable_segment", true}};
  expect_error(j, "hardware.allocator.expandable_segment", {"did you mean 'expandable_segments'?"});
}

TEST(ScenarioErrors, FieldInTheWrongSectionOrWithAnotherToolsName) {
  json j = minimal();
  j["seq_len"] = 64;
  expect_error(j, "seq_len", {"belongs in training", "training.seq_len"});
  j = minimal();
  j["training"]["batch_size"] = 8;
  expect_error(j, "training.batch_size", {"'batch_per_rank'"});
  j = minimal();
  j["fsdp"]["mp_policy"] = json::object();
  expect_error(j, "fsdp.mp_policy", {"fsdp.mixed_precision"});
  j = minimal();
  j["training"]["zzz"] = 1;
  expect_error(j, "training.zzz", {"unknown field 'zzz'", "training accepts", "'seq_len'"});
}

// ---------------------------------------------------------------- errors: values

TEST(ScenarioErrors, WrongTypes) {
  json j = minimal();
  j["training"]["seq_len"] = "8192";
  expect_error(j, "training.seq_len", {"\"8192\" (a string)", "not an integer", "without quotes"});
  j = minimal();
  j["training"]["seq_len"] = 64.5;
  expect_error(j, "training.seq_len", {"64.5", "not a whole number"});
  j = minimal();
  j["fsdp"]["cpu_offload"] = "yes";
  expect_error(j, "fsdp.cpu_offload", {"\"yes\"", "pin_memory"});
  j = minimal();
  j["fsdp"]["mixed_precision"] = {{"cast_forward_inputs", "true"}};
  expect_error(j, "fsdp.mixed_precision.cast_forward_inputs",
               {"\"true\" (a string)", "true or false"});
  j = minimal();
  j["training"]["optimizer"] = {{"lr", "fast"}};
  expect_error(j, "training.optimizer.lr", {"\"fast\"", "not a number"});
  j = minimal();
  j["fsdp"]["mesh"] = {{"shape", 2}};
  expect_error(j, "fsdp.mesh.shape", {"2 (a number)", "not an array"});
  j = minimal();
  j["model"] = 7;
  expect_error(j, "model", {"7 (a number)", "llama3.1-8b"});
}

TEST(ScenarioErrors, NonPositiveSizes) {
  const std::pair<const char*, int> cases[] = {
      {"seq_len", 0}, {"batch_per_rank", -1}, {"steps", 0}, {"grad_accum_steps", 0}};
  for (const auto& [key, value] : cases) {
    json j = minimal();
    j["training"][key] = value;
    expect_error(j, std::string("training.") + key, {"is " + std::to_string(value), ">= 1"});
  }
  json j = minimal();
  j["hardware"]["nodes"] = 0;
  expect_error(j, "hardware.nodes", {"is 0", ">= 1"});
  j = minimal();
  j["model"] = {{"name", "tiny-llama"}, {"dim", -64}};
  expect_error(j, "model.dim", {"is -64", ">= 1"});
  j = minimal();
  j["fsdp"]["forward_prefetch"] = -1;
  expect_error(j, "fsdp.forward_prefetch", {"is -1", ">= 0"});
  j = minimal();
  j["training"]["optimizer"] = {{"beta2", 1.0}};
  expect_error(j, "training.optimizer.beta2", {"is 1.0", "< 1"});
}

TEST(ScenarioErrors, MeshSizeMismatch) {
  json j = h100x16();
  j["fsdp"]["mesh"] = {{"shape", {4, 2}}};
  expect_error(
      j, "fsdp.mesh.shape",
      {"mesh [4, 2] has 8 ranks but hardware has 2 nodes x 8 GPUs = 16", "[16]", "[2, 8]"});
  j["fsdp"]["mesh"] = {{"shape", {2, 2, 4}}};
  expect_error(j, "fsdp.mesh", {"[2, 2, 4]", "3-D", "dim_names", "tp"});
  j["fsdp"]["mesh"] = {{"shape", {2, 2, 2, 2}}};
  expect_error(j, "fsdp.mesh.shape", {"[2,2,2,2]", "4-D mesh", "[replicate, shard]", "tp"});
  j["fsdp"]["mesh"] = {{"shape", {2, 2, 4}}, {"dim_names", {"dp_shard", "dp_replicate", "tp"}}};
  expect_error(j, "fsdp.mesh.dim_names",
               {"not a mesh fullshard builds", "[\"replicate\", \"shard\", \"tp\"]"});
  j["fsdp"]["mesh"] = {{"shape", json::array()}};
  expect_error(j, "fsdp.mesh.shape", {"[]", "0-D mesh"});
  j["fsdp"]["mesh"] = {{"shape", {4, 0}}};
  expect_error(j, "fsdp.mesh.shape[1]", {"is 0", ">= 1"});
  j["fsdp"]["mesh"] = {{"shape", {4, "4"}}};
  expect_error(j, "fsdp.mesh.shape[1]", {"\"4\" (a string)"});
}

TEST(ScenarioErrors, MeshDimNames) {
  json j = h100x16();
  j["fsdp"]["mesh"] = {{"shape", {2, 8}}, {"dim_names", {"shard", "replicate"}}};
  expect_error(j, "fsdp.mesh.dim_names",
               {"[\"shard\",\"replicate\"]", "[\"replicate\", \"shard\"]"});
  j["fsdp"]["mesh"] = {{"shape", {2, 8}}, {"dim_names", {"shard"}}};
  expect_error(j, "fsdp.mesh.dim_names", {"1 name for a 2-D mesh"});
  j["fsdp"]["mesh"] = {{"shape", {16}}, {"dim_names", {"dp"}}};
  expect_error(j, "fsdp.mesh.dim_names", {"[\"dp\"]", "[\"shard\"]"});
  j["fsdp"]["mesh"] = {{"shape", {16}}, {"dim_names", {3}}};
  expect_error(j, "fsdp.mesh.dim_names[0]", {"3 (a number)", "not a string"});
}

TEST(Scenario, PerUnitReshardAfterForward) {
  json j = h100x16();  // tiny-llama: 2 blocks
  j["fsdp"]["per_unit"] = {{"layers.-1", {{"reshard_after_forward", false}}},
                           {"root", {{"reshard_after_forward", true}}},
                           {"layers.0", {{"reshard_after_forward", 4}}}};
  const FsdpOptions f = parse(j).fsdp;
  ASSERT_EQ(f.per_unit_reshard.size(), 3u);
  EXPECT_EQ(f.reshard_for("layers.1").kind, ReshardAfterForward::Kind::kFalse);
  EXPECT_EQ(f.reshard_for("root").kind, ReshardAfterForward::Kind::kTrue);
  EXPECT_EQ(f.reshard_for("layers.0").kind, ReshardAfterForward::Kind::kInt);
  EXPECT_EQ(f.reshard_for("layers.0").n, 4);
  j["fsdp"]["per_unit"].erase("layers.0");
  EXPECT_EQ(parse(j).fsdp.reshard_for("layers.0").kind,
            ReshardAfterForward::Kind::kDefault);  // fsdp's value
}

TEST(ScenarioErrors, PerUnitReshardAfterForward) {
  json j = h100x16();
  auto with = [&](json per_unit) {
    json k = j;
    k["fsdp"]["per_unit"] = std::move(per_unit);
    return k;
  };
  const json no = {{"reshard_after_forward", false}};
  expect_error(with({{"layers.2", no}}), "fsdp.per_unit.layers.2",
               {"names block 2 of a model with 2 blocks", "-1 is the last block"});
  expect_error(with({{"layers.-3", no}}), "fsdp.per_unit.layers.-3", {"names block -3"});
  expect_error(with({{"layers.x", no}}), "fsdp.per_unit.layers.x",
               {"not an FSDP unit", "\"root\" or \"layers.N\""});
  expect_error(with({{"output", no}}), "fsdp.per_unit.output", {"belong to the root unit"});
  expect_error(with({{"layers.1", no}, {"layers.-1", no}}), "fsdp.per_unit.layers.1",
               {"names the same unit as \"layers.-1\""});
  expect_error(with({{"root", false}}), "fsdp.per_unit.root", {"not an object"});
  expect_error(with({{"root", json::object()}}), "fsdp.per_unit.root",
               {"sets nothing", "mixed_precision"});
  expect_error(with({{"root", {{"reshard_after_froward", false}}}}),
               "fsdp.per_unit.root.reshard_after_froward",
               {"did you mean 'reshard_after_forward'?"});
  expect_error(with({{"root", {{"reshard_after_forward", 3}}}}),
               "fsdp.per_unit.root.reshard_after_forward",
               {"does not divide the shard-dim size 16"});
  expect_error(with(json::array()), "fsdp.per_unit", {"not an object"});
  json r = with({{"layers.0", no}});
  r["fsdp"]["units"] = "root";
  expect_error(r, "fsdp.per_unit.layers.0",
               {"fsdp.units is \"root\"", "set fsdp.units to \"blocks\""});
}

TEST(ScenarioErrors, ReshardAfterForwardInt) {
  json j = h100x16();
  j["fsdp"]["reshard_after_forward"] = 3;
  expect_error(j, "fsdp.reshard_after_forward",
               {"is 3, which does not divide the shard-dim size 16", "1, 2, 4, 8 or 16"});
  j["fsdp"]["reshard_after_forward"] = 0;
  expect_error(j, "fsdp.reshard_after_forward", {"is 0", ">= 1", "write false"});
  j["fsdp"]["reshard_after_forward"] = -2;
  expect_error(j, "fsdp.reshard_after_forward", {"is -2", ">= 1"});
  j["fsdp"]["mesh"] = {{"shape", {2, 8}}};  // HSDP: the shard dim is 8
  j["fsdp"]["reshard_after_forward"] = 16;
  expect_error(j, "fsdp.reshard_after_forward", {"is 16", "shard-dim size 8"});
  j["fsdp"]["reshard_after_forward"] = "true";
  expect_error(j, "fsdp.reshard_after_forward", {"\"true\" (a string)", "no quotes"});
}

TEST(ScenarioErrors, UnknownModelListsKnownOnes) {
  json j = minimal();
  j["model"] = "llama3-8b";
  expect_error(j, "model",
               {"unknown model 'llama3-8b'", "did you mean 'llama3.1-8b'?", "'gpt2-124m'"});
  j["model"] = {{"name", "tiny-lama"}, {"n_layers", 1}};
  expect_error(j, "model.name", {"unknown model 'tiny-lama'", "did you mean 'tiny-llama'?"});
}

TEST(ScenarioErrors, ModelObjectProblems) {
  json j = minimal();
  j["model"] = json::parse(R"({"arch": "llama", "vocab_size": 100, "n_layers": 1, "n_heads": 4,
                               "ffn_dim": 64, "max_seq_len": 64})");
  expect_error(j, "model.dim", {"is missing", "inline model"});
  j["model"] = {{"name", "llama3.1-8b"}, {"hf_config", "hf/config.json"}};
  expect_error(j, "model.name", {"together with model.hf_config"});
  j["model"] = {{"name", "llama3.1-8b"}, {"n_heads", 30}};
  expect_error(j, "model.n_heads", {"30", "does not divide"});  // validate_model's check
  j["model"] = {{"name", "llama3.1-8b"}, {"arch", "mamba"}};
  expect_error(j, "model.arch", {"\"mamba\"", "\"llama\""});
}

TEST(ScenarioErrors, UnknownHardwareProfile) {
  json j = minimal();
  j["hardware"]["profile"] = "h100x";
  expect_error(j, "hardware.profile",
               {"unknown hardware profile 'h100x'", "did you mean", "'h100-sxm-80gb'", "'b200'"});
  j["hardware"]["profile"] = "missing/profile.json";
  expect_error(j, "hardware.profile", {"file not found", "missing/profile.json"});
}

TEST(ScenarioErrors, ActivationCheckpointing) {
  json j = minimal();
  j["training"]["activation_checkpointing"] = {{"mode", "selective_layer"}, {"every", 0}};
  expect_error(j, "training.activation_checkpointing.every", {"is 0", ">= 1"});
  j["training"]["activation_checkpointing"] = {{"mode", "selective_layer"}};
  expect_error(j, "training.activation_checkpointing.every", {"is missing"});
  j["training"]["activation_checkpointing"] = {{"mode", "full"}, {"every", 2}};
  expect_error(j, "training.activation_checkpointing.every", {"mode is \"full\"", "remove"});
  j["training"]["activation_checkpointing"] = "selective_layer";
  expect_error(j, "training.activation_checkpointing", {"without a period", "\"every\": 2"});
  j["training"]["activation_checkpointing"] = "fulll";
  expect_error(j, "training.activation_checkpointing", {"\"fulll\"", "did you mean \"full\"?"});
  j["training"]["activation_checkpointing"] = true;
  expect_error(j, "training.activation_checkpointing", {"is true", "\"none\""});
}

TEST(ScenarioErrors, Dtypes) {
  json j = minimal();
  j["fsdp"]["mixed_precision"] = {{"param_dtype", "bf17"}};
  expect_error(j, "fsdp.mixed_precision.param_dtype", {"\"bf17\"", "did you mean \"bf16\"?"});
  j["fsdp"]["mixed_precision"] = {{"reduce_dtype", "torch.float32"}};
  expect_error(j, "fsdp.mixed_precision.reduce_dtype", {"\"torch.float32\"", "write \"fp32\""});
  j["fsdp"]["mixed_precision"] = {{"output_dtype", "int8"}};
  expect_error(j, "fsdp.mixed_precision.output_dtype",
               {"\"int8\"", "\"fp32\", \"bf16\", \"fp16\""});
}

// fsdp.per_unit.<unit>.mixed_precision: the fields a unit sets over fsdp.mixed_precision, and
// NOTE [Dtype flow between units] (core/scenario/scenario_checks.cc): a unit never computes on
// activations of another dtype.
TEST(ScenarioFsdp, PerUnitMixedPrecision) {
  json j = minimal();
  j["fsdp"]["mixed_precision"] = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  j["fsdp"]["per_unit"] = {
      {"layers.0", {{"mixed_precision", {{"param_dtype", "fp32"}, {"output_dtype", "bf16"}}}}},
      {"root", {{"mixed_precision", {{"output_dtype", "fp32"}}}}}};
  const FsdpOptions f = parse(j).fsdp;
  const MixedPrecisionPolicy b0 = f.mixed_precision_for("layers.0");
  EXPECT_EQ(b0.param_dtype, DType::kFloat32);
  EXPECT_EQ(b0.reduce_dtype, DType::kFloat32);  // from fsdp.mixed_precision
  EXPECT_EQ(b0.output_dtype, DType::kBFloat16);
  EXPECT_EQ(f.mixed_precision_for("layers.1").param_dtype, DType::kBFloat16);
  EXPECT_EQ(f.mixed_precision_for("root").output_dtype, DType::kFloat32);
  EXPECT_EQ(f.mixed_precision_for("root").param_dtype, DType::kBFloat16);
  // The last block in fp32 without an output cast hands the root's bf16 norm fp32 activations.
  const int last = static_cast<int>(parse(j).model.n_layers) - 1;
  j["fsdp"]["per_unit"] = {{"layers.-1", {{"mixed_precision", {{"param_dtype", "fp32"}}}}}};
  expect_error(
      j, "fsdp.mixed_precision",
      {"unit 'root' compute in bf16 on fp32 activations from 'layers." + std::to_string(last) + "'",
       "output_dtype to \"bf16\""});
  // A block that does not cast its input gets the previous unit's bf16.
  j["fsdp"]["per_unit"] = {
      {"layers.0",
       {{"mixed_precision",
         {{"param_dtype", "fp32"}, {"cast_forward_inputs", false}, {"output_dtype", "bf16"}}}}}};
  expect_error(j, "fsdp.per_unit.layers.0.mixed_precision",
               {"'layers.0' compute in fp32 on bf16", "cast_forward_inputs"});
  j["fsdp"]["per_unit"] = {{"layers.0", {{"mixed_precision", {{"param_dtype", "fp8"}}}}}};
  expect_error(j, "fsdp.per_unit.layers.0.mixed_precision.param_dtype", {"\"fp8\""});
  j["fsdp"]["per_unit"] = {{"layers.0", {{"mixed_precision", {{"param_type", "fp32"}}}}}};
  expect_error(j, "fsdp.per_unit.layers.0.mixed_precision.param_type", {"param_type"});
}

TEST(ScenarioErrors, OtherFsdpAndHardwareValues) {
  json j = minimal();
  j["fsdp"]["units"] = "layers";
  expect_error(j, "fsdp.units", {"\"layers\"", "\"blocks\", \"root\" or \"embed_blocks_head\""});
  j = minimal();
  j["hardware"]["memory_gib"] = 80;
  j["hardware"]["memory_bytes"] = 100;
  expect_error(j, "hardware.memory_bytes", {"together with hardware.memory_gib"});
  j = minimal();
  j["hardware"]["memory_gib"] = 0;
  expect_error(j, "hardware.memory_gib", {"is 0", "> 0"});
  j = minimal();
  j["hardware"]["non_allocator_gib"] = 16;
  expect_error(j, "hardware.non_allocator_gib", {"leaves no memory"});
  j = minimal();
  j["hardware"]["allocator"] = {{"max_split_size_mb", 20}};
  expect_error(j, "hardware.allocator.max_split_size_mb", {"is 20", "> 20"});
}

TEST(ScenarioErrors, Gpt2SequenceLongerThanPositions) {
  json j = minimal();
  j["model"] = "gpt2-124m";
  j["training"]["seq_len"] = 2048;
  expect_error(j, "training.seq_len", {"is 2048", "1024", "model.max_seq_len"});
}

// ---------------------------------------------------------------- schema vs parser

// Collects the property names of every object schema reachable from `s`, keyed by the scenario
// path they describe (array items share their array's path).
void collect(const json& s, const json& root, const std::string& path,
             std::map<std::string, std::set<std::string>>& out) {
  if (s.contains("$ref")) {
    const std::string ref = s.at("$ref");
    ASSERT_EQ(ref.rfind("#/$defs/", 0), 0u) << ref;
    collect(root.at("$defs").at(ref.substr(8)), root, path, out);
  }
  for (const char* k : {"oneOf", "anyOf", "allOf"})
    if (s.contains(k))
      for (const auto& sub : s.at(k)) collect(sub, root, path, out);
  if (s.contains("items")) collect(s.at("items"), root, path, out);
  if (s.contains("properties")) {
    EXPECT_EQ(s.value("additionalProperties", true), false) << "at '" << path << "'";
    auto& names = out[path];
    for (const auto& [key, sub] : s.at("properties").items()) {
      names.insert(key);
      collect(sub, root, json_reader::child_path(path, key), out);
    }
  }
}

TEST(ScenarioSchema, PropertiesMatchTheParser) {
  std::ifstream in(kSource / "docs/scenario.schema.json");
  ASSERT_TRUE(in) << "docs/scenario.schema.json";
  const json schema = json::parse(in);
  EXPECT_EQ(schema.at("$schema"), "https://json-schema.org/draft/2020-12/schema");
  std::map<std::string, std::set<std::string>> from_schema;
  collect(schema, schema, "", from_schema);
  std::map<std::string, std::set<std::string>> from_parser;
  for (const auto& [section, names] : scenario_fields())
    from_parser[section] = std::set<std::string>(names.begin(), names.end());
  EXPECT_EQ(from_schema, from_parser);
}

TEST(ScenarioSchema, ShippedScenariosUseOnlySchemaFields) {
  // A light structural check without a validator: every key of every shipped scenario is a
  // schema property at its path.
  std::ifstream in(kSource / "docs/scenario.schema.json");
  const json schema = json::parse(in);
  std::map<std::string, std::set<std::string>> props;
  collect(schema, schema, "", props);
  std::function<void(const json&, const std::string&)> check = [&](const json& v,
                                                                   const std::string& path) {
    if (!v.is_object()) return;
    for (const auto& [key, sub] : v.items()) {
      EXPECT_TRUE(props[path].count(key)) << path << "." << key;
      check(sub, json_reader::child_path(path, key));
    }
  };
  for (const auto& f : shipped_scenarios()) {
    std::ifstream s(f);
    check(json::parse(s), "");
  }
}

// ---------------------------------------------------------------- helpers

TEST(JsonReader, EditDistanceAndClosest) {
  using json_reader::closest;
  EXPECT_EQ(json_reader::edit_distance("seq_lenn", "seq_len"), 1u);
  EXPECT_EQ(json_reader::edit_distance("SEQ_LEN", "seq_len"), 0u);
  EXPECT_EQ(closest("seqlen", {"batch_per_rank", "seq_len", "steps"}), "seq_len");
  EXPECT_EQ(closest("accum", {"seq_len", "grad_accum_steps"}), "grad_accum_steps");
  EXPECT_EQ(closest("zzz", {"seq_len", "steps"}), std::nullopt);
}

TEST(ScenarioParse, RankBatchGivesAnUnevenBatch) {
  nlohmann::json j = {
      {"model", "tiny-llama"},
      {"training",
       {{"seq_len", 8}, {"batch_per_rank", 2}, {"rank_batch", {{{"rank", 1}, {"batch", 3}}}}}},
      {"fsdp", {{"mesh", {{"shape", {2}}}}}},
      {"hardware", {{"profile", "cpu"}, {"nodes", 1}, {"gpus_per_node", 2}}}};
  Scenario s = parse_scenario(j);
  EXPECT_EQ(s.training.batch_for(0), 2);
  EXPECT_EQ(s.training.batch_for(1), 3);
  EXPECT_TRUE(s.training.uneven_batch());
  j["training"]["rank_batch"] = {{{"rank", 2}, {"batch", 3}}};
  try {
    parse_scenario(j);
    FAIL() << "rank 2 of 2 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "training.rank_batch");
    EXPECT_NE(std::string(e.what()).find("has 2 ranks"), std::string::npos) << e.what();
  }
  j["training"]["rank_batch"] = {{{"rank", 1}, {"batch", 0}}};
  EXPECT_THROW(parse_scenario(j), InputError);
}

// NOTE [Bounded show] (core/scenario/json_reader.cc): a value shown in an error is rendered only as
// far as shown, so a value nested far deeper than the parser allows (built in code) or hundreds of
// MB long costs nothing.
TEST(JsonReaderShow, DeepOrHugeValuesAreShownBounded) {
  json deep = 1;
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  const std::string s = json_reader::show(deep);
  EXPECT_LE(s.size(), 60u);
  EXPECT_EQ(s.substr(0, 5), "[[[[[");
  EXPECT_EQ(json_reader::show(json(std::string(50 << 20, 'x'))).size(), 60u);
  json wide = json::array();
  for (int i = 0; i < 1000000; ++i) wide.push_back(i);
  EXPECT_EQ(json_reader::show(wide).substr(0, 8), "[0,1,2,3");
  EXPECT_EQ(json_reader::show(json::parse(R"({"mode":"full"})")), R"({"mode":"full"})");
  EXPECT_EQ(json_reader::show(json::array({4, 4})), "[4,4]");
  json nan_number = std::nan("");
  EXPECT_THROW(json_reader::get_number(nan_number, "x", 0, true, 1, true, "0.5"), InputError);
}

}  // namespace
}  // namespace fullshard
