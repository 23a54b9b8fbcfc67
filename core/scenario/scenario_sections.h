#pragma once
// Internal to core/scenario: the field checks scenario.cc applies to every section, and the
// section parsers that live in their own files (scenario_fsdp.cc: fsdp and tensor_parallel;
// scenario_training.cc: training), and
// the checks across sections (scenario_checks.cc).
// Not part of the public API: include core/scenario/scenario.h.
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"

namespace fullshard::scenario_detail {

inline constexpr int64_t kMaxSize = int64_t{1} << 40;  // any model or batch size; catches garbage
inline constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr int64_t kMaxRanksPerDim = int64_t{1} << 20;  // nodes, GPUs per node, a mesh dim

// `path` relative to the scenario file's directory `base_dir` (absolute paths unchanged).
std::string resolve(const std::string& base_dir, const std::string& path);

// Rejects unknown keys of `obj` against the field table of `section` (scenario_fields()),
// with a typo, alias or wrong-section hint (NOTE [Scenario errors] in scenario.cc).
void check_fields(const nlohmann::json& obj, const std::string& section);

// obj[key] as an integer in [min, max], errors naming "section.key".
int64_t field_int(const nlohmann::json& obj, const std::string& section, const char* key,
                  int64_t min, int64_t max, const std::string& example);

// tied_head: a Llama with tied embeddings (fsdp.per_unit's "tok_embeddings", "norm" and
// "output" then name one embed_blocks_head unit).
FsdpOptions parse_fsdp(const nlohmann::json& j, const HardwareOptions& hw, int64_t n_layers,
                       bool tied_head);
TensorParallelOptions parse_tensor_parallel(const nlohmann::json& j);
// The pipeline_parallel section (scenario_pipeline.cc; null: absent), checked against the
// parsed model, training, fsdp mesh and hardware of `s`; resolves the stages and microbatches.
PipelineParallelOptions parse_pipeline_parallel(const nlohmann::json* j, const Scenario& s);
// The training section (scenario_training.cc); `model` for checks against its sizes.
TrainingOptions parse_training(const nlohmann::json& j, const ModelConfig& model,
                               const std::string& base_dir);

// The context_parallel section (scenario_cp.cc; null: absent), resolved against fsdp.mesh's cp
// dim and checked against the rest of `s` (NOTE [What context parallelism composes with]).
ContextParallelOptions parse_context_parallel(const nlohmann::json* j, const Scenario& s);

// The expert_parallel section (scenario_ep.cc), read and checked against the rest of `s`.
ExpertParallelOptions parse_expert_parallel(const nlohmann::json& j, const Scenario& s);

// Checks across sections (scenario_checks.cc), run by parse_scenario after every section:
// what async TP needs (NOTE [What async TP needs]), and the unit layout and loss that need a
// Llama output module (fsdp.units embed_blocks_head, loss chunked). Each throws
// InputError naming the field. check_dtype_flow is public (scenario.h).
void check_async_tp(const Scenario& s);
void check_units_and_loss(const Scenario& s);
// training.init other than "meta" needs each parameter's shard to be rows of its full tensor: no
// tp, ep or pp dim, no MoE, no CPU offload, no model.weights (NOTE [Initialisation modes]).
void check_model_init(const Scenario& s);

// model.lora, training.frozen and training.frozen_dtype (scenario_lora.cc); check_frozen is
// public (lora_checks.h).
LoraConfig parse_lora(const nlohmann::json& v, const ModelConfig& model);
std::vector<std::string> parse_frozen(const nlohmann::json& v);
std::optional<DType> parse_frozen_dtype(const nlohmann::json& v);
// training.nf4's block sizes (scenario_nf4.cc); check_nf4 is public (lora_checks.h).
void parse_nf4(const nlohmann::json& v, Nf4Config& nf4);
// fsdp.ignored_params (scenario_ignored.cc); check_ignored_params is public (lora_checks.h).
std::vector<std::string> parse_ignored_params(const nlohmann::json& v);

}  // namespace fullshard::scenario_detail
