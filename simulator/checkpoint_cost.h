#pragma once
// What saving a distributed checkpoint costs (training.checkpoint, `fullshard plan
// --checkpoint-every`): a pure function of the scenario, the hardware profile and the step time.
//
// NOTE [Checkpoint cost]: as torch.distributed.checkpoint saves a FSDP2 model, every rank of
// replica 0 (HSDP: DCP deduplicates the other replicas) copies its unpadded local shards of the
// parameters (in their original dtype: training.orig_dtype, frozen_dtype) and the AdamW states
// of the trainable ones to pageable host memory, a tensor at a time, then writes them; a node's
// ranks share its storage bandwidth (docs/cost-model.md, "Checkpoints").
//   shard_bytes(r) = sum over parameters of local rows(r) x row elements x dtype bytes x
//                    (3: the parameter, exp_avg, exp_avg_sq; 1 when frozen: no AdamW state)
//                    + on global rank 0 only, every persistent buffer's bytes, whole (NOTE
//                    [Persistent buffers in checkpoints]: DeepSeek-V3's expert_bias, E x 4
//                    bytes per MoE layer)
//   d2h_s   = max over ranks of e after: e = 0; for tensor i = 1..n in state-dict order,
//             e = max(e, i x launch) + bytes_i / pageable_copy_bandwidth
//             (launch = eager_dispatch_s + launch_overhead_s)
//   write_s = max over nodes of the node's shard_bytes / storage_write_bandwidth
//   exposed = d2h_s + write_s (sync); d2h_s + max(0, write_s - every x step_time_s) (async)
//   per step = exposed / every; async host staging = the largest shard_bytes.
// Not modelled: the commit (metadata, fsyncs) and the file system's latency; device memory is
// untouched. The engine plays the same saves (NOTE [Playing a checkpoint save] in
// checkpoint_play.h) and its test checks they expose this closed form, which the planner keeps as
// its fast path.
//
// NOTE [Checkpoint storage bandwidth]: the hardware profiles hold no storage figure. The
// default, 2e9 bytes/s per node, is an assumption (about one local NVMe SSD's sequential
// write, or a share of a parallel file system), not a measurement: set
// training.checkpoint.storage_write_bandwidth (or `plan --storage-write-bandwidth`) to your
// storage's figure.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/module.h"
#include "core/scenario/scenario.h"

namespace fullshard::sim {

// A save as the engine played it (NOTE [Playing a checkpoint save]): after step `step`, from
// the host's "checkpoint save" to its "checkpoint end" (async: includes waiting for the
// previous save's write).
struct PlayedCheckpointSave {
  int step = 0;
  double begin_s = 0, end_s = 0;
  double write_begin_s = 0, write_end_s = 0;  // its write on the checkpoint lane
  double exposed_s() const { return end_s - begin_s; }
};

struct CheckpointCost {
  int every = 0;
  CheckpointSaveMode mode = CheckpointSaveMode::kSync;
  double d2h_bandwidth = 0;            // bytes/s (the profile's pageable_copy_bandwidth)
  double launch_s = 0;                 // host seconds per copy (eager dispatch + launch)
  double storage_write_bandwidth = 0;  // bytes/s per node
  std::vector<uint64_t> shard_bytes;   // per rank: what it copies and writes (0: not a writer)
  uint64_t node_bytes = 0;             // the busiest node's bytes
  double d2h_s = 0;                    // slowest rank's device-to-host copy
  double write_s = 0;                  // slowest node's write
  double exposed_s = 0;                // per save: what training waits
  double hidden_s = 0;                 // per save: written while training goes on (async)
  double amortised_s_per_step = 0;     // exposed_s / every
  uint64_t host_staging_bytes = 0;     // async: the largest rank's staging buffer (host memory)
  int saves = 0;                       // in training.steps
  // Played (simulate_scenario with play_checkpoint): the saves of the played steps, of the
  // slowest writing rank class, and the end of the run's wait for the last async write.
  std::vector<PlayedCheckpointSave> played;
  double played_final_wait_s = 0;
};

// The cost of s.training.checkpoint at step time `step_time_s`. Requires every > 0.
CheckpointCost checkpoint_cost(const Scenario& s, double step_time_s);

// Each rank's unpadded local shard bytes of parameters and AdamW states, and on rank 0 the
// persistent buffers (0 for ranks that do not write: replicas other than the first).
std::vector<uint64_t> checkpoint_shard_bytes(const Scenario& s);

// The order a save copies a rank's tensors in (DCP's state dict: the model's state dict, each
// module's parameters then its persistent buffers, then its children's, as nn.Module.state_dict
// orders them; then the optimizer's exp_avg and exp_avg_sq of each parameter). `index`: into the
// model's parameters (Module::for_each_param order) or, for kBuffer, its persistent buffers
// (Module::for_each_module order). `buffers`: whether the rank writes the buffers (global rank
// 0: NOTE [Persistent buffers in checkpoints] in core/checkpoint/checkpoint_metadata.h).
struct CheckpointCopy {
  enum Which : int { kParam = 0, kExpAvg = 1, kExpAvgSq = 2, kBuffer = 3 };
  size_t index = 0;
  Which which = kParam;
};
std::vector<CheckpointCopy> checkpoint_copy_order(Module& root, bool buffers);

// Seconds the copies of `bytes` (in copy order) take on one stream when the host issues one
// every `launch_s` seconds, from the host's start: the chain of NOTE [Checkpoint cost].
double checkpoint_copy_seconds(const std::vector<uint64_t>& bytes, double bandwidth,
                               double launch_s);

nlohmann::json checkpoint_cost_json(const CheckpointCost& c);

}  // namespace fullshard::sim
