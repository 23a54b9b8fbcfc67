#pragma once
// A scenario: one JSON file that says what to train and how to shard it. The simulator
// predicts it, real backends run it. Format: docs/scenario-format.md and
// docs/scenario.schema.json.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/fsdp/fsdp_api.h"
#include "core/memory/caching_allocator.h"
#include "core/model/model_config.h"
#include "core/scenario/hardware_profile.h"
#include "core/tensor/dtype.h"

namespace fullshard {

// ---------------------------------------------------------------- training
enum class CheckpointMode : uint8_t {
  kNone,
  kFull,           // every block recomputed in backward (torchtitan ac mode "full")
  kSelectiveLayer, // every `every`-th block fully checkpointed (torchtitan "selective", int)
  kSelectiveOp,    // op-level selective: save mm/attention outputs (torchtitan "selective", "op")
};

struct ActivationCheckpointing {
  CheckpointMode mode = CheckpointMode::kNone;
  int every = 1;  // kSelectiveLayer: checkpoint blocks whose index % every == 0
};

struct OptimizerOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double max_grad_norm = 1.0;  // 0 disables gradient clipping
  bool fused = false;          // implementation: "foreach" (PyTorch's default) or "fused"
};

struct TrainingOptions {
  int64_t batch_per_rank = 1;  // sequences per rank per micro-batch
  std::map<int, int64_t> rank_batch;  // ranks whose micro-batch differs (an uneven batch)
  int64_t seq_len = 0;         // tokens per sequence
  int steps = 1;               // optimizer steps to run
  int grad_accum_steps = 1;    // micro-batches per optimizer step (sync on the last one)
  ActivationCheckpointing activation_checkpointing;
  OptimizerOptions optimizer;
  uint64_t seed = 0;
  int64_t batch_for(int rank) const;  // sequences per micro-batch of `rank`
  bool uneven_batch() const;          // some rank's batch differs from batch_per_rank
};

// ---------------------------------------------------------------- fsdp
// ReshardAfterForward and MixedPrecisionPolicy: core/fsdp/fsdp_api.h.

// Which modules get their own fully_shard call (one parameter group each). The root
// always does, and claims every parameter no earlier call claimed.
enum class ShardingUnits : uint8_t {
  kBlocks,  // each transformer block, then the root (torchtitan's default)
  kRoot,    // only the root: one group for the whole model
};

struct FsdpOptions {
  std::vector<int> mesh_shape;               // [W] for FSDP, [R, S] for HSDP
  std::vector<std::string> mesh_dim_names;   // ["shard"] or ["replicate", "shard"]
  ReshardAfterForward reshard_after_forward;
  MixedPrecisionPolicy mixed_precision;
  bool cpu_offload = false;                  // CPUOffloadPolicy
  bool pin_memory = true;
  ShardingUnits units = ShardingUnits::kBlocks;
  int forward_prefetch = 0;   // explicit: each unit prefetches the next N units' all-gathers
  int backward_prefetch = 1;  // 1 = FSDP2's implicit backward prefetch; N > 1 explicit
};

// ---------------------------------------------------------------- hardware
struct HardwareOptions {
  std::string profile;       // name of scenarios/hardware/<profile>.json
  int gpus_per_node = 8;
  int nodes = 1;
  std::optional<uint64_t> memory_bytes;  // override the profile's device memory
  AllocatorOptions allocator;            // capacity filled from the profile at load time
  // Override of the profile's bytes outside the caching allocator (CUDA context, NCCL, ...).
  std::optional<uint64_t> non_allocator_bytes;
  // CPU threads each rank's process gives an offloaded optimizer step (torchrun sets
  // OMP_NUM_THREADS=1 per worker unless told otherwise).
  int host_threads_per_rank = 1;
  // Ranks whose compute runs at another speed than the profile's (a straggler: 0.8 is 20%
  // slower), by global rank. Empty: every rank runs at the profile's speed.
  std::map<int, double> rank_speed;
  // Profile figures the scenario overrode (NOTE [Hardware overrides] in scenario.cc).
  std::vector<std::string> overridden;
  // The loaded profile with the overrides above applied (device.memory_bytes and
  // device.non_allocator_bytes are what the allocator capacity was computed from;
  // device.gpus_per_node is gpus_per_node).
  HardwareProfile device;
};

struct Scenario {
  std::string name;  // file stem unless given (empty from parse_scenario without "name")
  std::string description;  // free text, optional
  ModelConfig model;
  // model.weights: safetensors weights to start from (a file, or a folder with
  // model.safetensors or model.safetensors.index.json), resolved against the scenario's
  // folder; "" when absent. `fullshard train --init-from` overrides it.
  std::string model_weights;
  TrainingOptions training;
  FsdpOptions fsdp;
  HardwareOptions hardware;
  int world_size() const;
};

// Parses and validates; every error is an InputError naming the JSON path, the bad value
// and the fix. `base_dir` resolves relative paths (e.g. model.hf_config).
Scenario parse_scenario(const nlohmann::json& j, const std::string& base_dir = ".");
Scenario load_scenario_file(const std::string& path);  // missing file / bad JSON: InputError

// The field names the parser accepts in each JSON object of the format, keyed by the object's
// path with array indices dropped: "" (top level), "model", "training", "training.optimizer",
// "training.activation_checkpointing", "fsdp", "fsdp.mesh", "fsdp.mixed_precision",
// "fsdp.cpu_offload", "hardware", "hardware.allocator", "hardware.rank_speed", "training.rank_batch",
// "model.implementation". Tests check docs/scenario.schema.json
// against it.
const std::map<std::string, std::vector<std::string>>& scenario_fields();

// Spellings of enums, as the format writes them ("selective_layer", "blocks", ...).
const char* checkpoint_mode_name(CheckpointMode m);
const char* sharding_units_name(ShardingUnits u);

}  // namespace fullshard
