#pragma once
// The capacity planner's search space (docs/planner.md): every way to shard and train one
// model on N GPUs that FSDP2 offers, as a flat, deterministic list of candidates. Each
// candidate is a set of settings on top of a base scenario (the model, the hardware, the
// sequence length, the optimizer), and becomes a Scenario the simulator runs unchanged.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/scenario/scenario.h"

namespace fullshard::planner {

// The three mixed-precision settings the planner tries (MixedPrecisionPolicy).
enum class Precision : uint8_t {
  kFp32,            // no policy: fp32 parameters, compute and reduction
  kBf16Fp32Reduce,  // param_dtype=bf16, reduce_dtype=fp32 (torchtitan's default)
  kBf16,            // param_dtype=bf16, reduce_dtype=bf16
};
const char* precision_name(Precision p);  // "fp32", "bf16+fp32-reduce", "bf16"

// Float8 training the planner tries with --float8 (training.float8, docs/float8.md): off, a
// recipe, or tensorwise with FSDP2's float8 all-gather and precomputed scales (torchtitan's
// recommended tensorwise setting). Only on GPUs with float8 rates.
enum class Float8Choice : uint8_t {
  kOff,
  kTensorwise,
  kTensorwiseAllGather,
  kRowwise,
  kRowwiseWithGwHp,
};
const char* float8_choice_name(Float8Choice f);  // "off", "tensorwise", "tensorwise+fp8-ag", ...
// Every choice, off first (what --float8 searches).
const std::vector<Float8Choice>& float8_choices();

struct Candidate {
  // Mesh: replicate == 1 is FSDP over all ranks (mesh [shard]); replicate > 1 is HSDP
  // (mesh [replicate, shard]). replicate x shard == world size.
  // tp > 1 adds a tensor-parallel dim: mesh [shard, tp] or [replicate, shard, tp], and
  // replicate x shard x tp == world size.
  int replicate = 1;
  int shard = 1;
  int tp = 1;
  // Expert parallelism (expert_parallel.degree, NOTE [What expert parallelism needs]): ep ranks of
  // the shard dim split the experts; 1 is none. Not a mesh dim of its own (torchtitan carves it
  // out of dp_shard), so replicate x shard x tp stays the world size.
  int ep = 1;
  // Pipeline parallelism (NOTE [Pipeline candidates] in search_space.cc): pp > 1 adds a leading
  // "pp" mesh dim (torchtitan's order), so pp x replicate x shard x tp == world size, and runs
  // `pp_schedule` over grad_accum microbatches of micro_batch sequences.
  int pp = 1;
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::k1F1B;
  // Context parallelism (NOTE [Context-parallel candidates] in search_space.cc): cp > 1 adds a
  // "cp" mesh dim after shard, so pp x replicate x shard x cp x tp == world size; FSDP shards
  // over shard x cp, and each sequence is split over the cp ranks.
  int cp = 1;
  CpRotateMethod cp_rotate = CpRotateMethod::kAllGather;
  ReshardAfterForward reshard;
  Precision precision = Precision::kFp32;
  bool cpu_offload = false;
  ActivationCheckpointing ac;
  int64_t micro_batch = 1;  // sequences per GPU per micro-batch (training.batch_per_rank)
  int grad_accum = 1;       // micro-batches per optimizer step
  bool expandable_segments = false;
  Float8Choice float8 = Float8Choice::kOff;

  bool hsdp() const { return replicate > 1; }
  bool operator==(const Candidate& o) const;
};

struct SpaceOptions {
  int gpus = 1;
  int gpus_per_node = 1;
  int64_t n_layers = 1;
  // Sequences per optimizer step over all GPUs. Unset: each micro-batch size in
  // `micro_batches` with no accumulation (the global batch is then gpus x micro-batch).
  std::optional<int64_t> global_batch;
  std::vector<int64_t> micro_batches = {1, 2, 4, 8};
  // Tensor-parallel degrees to try (tp_degrees() picks them for a model); {1}: none.
  std::vector<int> tp_degrees = {1};
  // Expert-parallel degrees to try (mixture-of-experts models only; ep_degrees() picks them).
  // Empty: plan() keeps the base scenario's expert_parallel.degree.
  std::vector<int> ep_degrees;
  // Pipeline-parallel degrees and schedules to try ({1}: none). pp > 1 needs global_batch: a
  // pipeline's microbatches are the accumulation steps of batch_options().
  std::vector<int> pp_degrees = {1};
  std::vector<PipelineScheduleKind> pp_schedules = {PipelineScheduleKind::k1F1B,
                                                    PipelineScheduleKind::kInterleaved1F1B};
  // Context-parallel degrees and rotate methods to try ({1}: none).
  std::vector<int> cp_degrees = {1};
  std::vector<CpRotateMethod> cp_rotates = {CpRotateMethod::kAllGather};
  // Float8 settings to try ({kOff}: none; plan --float8: float8_choices()).
  std::vector<Float8Choice> float8 = {Float8Choice::kOff};
};

// The tp degrees in {1, 2, 4, 8} a model can use on this hardware: within a node (tp divides
// gpus_per_node, so a tp group never crosses nodes), dividing the GPUs, and splitting the
// model (check_tensor_parallel: heads, kv heads, ffn_dim, vocab, seq_len).
// loss_parallel: tensor_parallel.loss_parallel of the scenario (check_tensor_parallel's loss
// rules).
std::vector<int> tp_degrees(const ModelConfig& model, int64_t seq_len, int gpus, int gpus_per_node,
                            bool loss_parallel = true);

// The ep degrees the planner tries for a mixture-of-experts model when --ep is not given: 1 and
// each power of two up to `gpus_per_node` that divides the experts and the GPUs (all-to-all inside
// a node, torchtitan's usual layout); {1} for a dense model. Candidates an ep does not fit (a shard
// size it does not divide, NOTE [What expert parallelism needs]) are left out later.
std::vector<int> ep_degrees(const ModelConfig& model, int gpus, int gpus_per_node);

// Whether the shard dim's groups stay inside one node. The mesh is row-major with tp innermost
// ([replicate, shard, tp], torchtitan's order), so a shard group is `shard` ranks spaced `tp`
// apart and its ranks lie in a run of shard x tp consecutive ranks: inside a node exactly when
// that run divides gpus_per_node (tp dividing gpus_per_node, as tp_degrees() keeps it), or when
// the group is one rank.
bool shard_group_within_node(const Candidate& c, int gpus_per_node);

// Throws InputError naming the flag (--gpus, --gpus-per-node, --global-batch) when the space
// is empty: GPUs not a multiple of GPUs per node, a global batch that is not a whole number
// of sequences per GPU.
void check_space_options(const SpaceOptions& o);

// NOTE [Selective layer periods]: torchtitan's selective layer AC checkpoints blocks whose
// (index + 1) % k == 0. Periods that checkpoint the same number of blocks (floor(L / k)) do
// the same recomputation and keep the same activations (only their position differs), so the
// planner keeps the smallest k for each count. k = 1 is "full".
std::vector<int> selective_layer_periods(int64_t n_layers);

// The shard-dim sizes a world of `gpus` allows, FSDP first: gpus itself, then every proper
// divisor (HSDP [gpus / s, s]) from large to small.
std::vector<int> shard_sizes(int gpus);
// reshard_after_forward values for a shard dim of `shard`: null (FSDP2's default), true,
// false, then every int that divides `shard` other than 1 (acts as false) and `shard` (true).
std::vector<ReshardAfterForward> reshard_options(int shard);
// (micro-batch, accumulation) pairs meeting the global batch.
// `dp` is the data-parallel size (GPUs / (tp x pp)): a tp group, and a pipeline, trains on one
// batch.
std::vector<std::pair<int64_t, int>> batch_options(const SpaceOptions& o, int dp);

// Every candidate, in a fixed order (mesh, reshard, precision, offload, checkpointing,
// batch, expandable segments; expandable off and on are adjacent).
std::vector<Candidate> enumerate_candidates(const SpaceOptions& o);

// The scenario a candidate runs: `base` with the candidate's mesh, reshard, precision,
// offload, checkpointing, batch and allocator settings. `base` must already have the
// planner's hardware (nodes x gpus_per_node = the world size).
Scenario candidate_scenario(const Scenario& base, const Candidate& c);

// One line, e.g. "HSDP 4x64, reshard 8, bf16, AC full, mb 1 x ga 2, expandable".
std::string candidate_text(const Candidate& c);
// The settings as JSON (the planner's report): mesh, reshard_after_forward, param_dtype, ...
nlohmann::json candidate_settings_json(const Candidate& c);
// Short labels of single settings, for family reasons ("reshard_after_forward=false", ...).
std::string mesh_text(const Candidate& c);
std::string reshard_text(const ReshardAfterForward& r);
std::string ac_text(const ActivationCheckpointing& ac);

}  // namespace fullshard::planner
