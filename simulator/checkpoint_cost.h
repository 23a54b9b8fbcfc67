#pragma once
// What saving a distributed checkpoint costs (training.checkpoint, `fullshard plan
// --checkpoint-every`): a pure function of the scenario, the hardware profile and the step time.
//
// NOTE [Checkpoint cost]: as torch.distributed.checkpoint saves a FSDP2 model, every rank of
// replica 0 (HSDP: one replica writes, DCP deduplicates the others) copies its unpadded local
// shards of the parameters and both AdamW states (fp32, the dtype fullshard keeps them in) to
// host memory, then writes them; the ranks of a node share its storage bandwidth.
//   shard_bytes(r) = 3 x 4 x sum over parameters of local rows(r) x row elements
//   d2h_s          = max over ranks of shard_bytes(r) / pageable_copy_bandwidth
//                    (DCP copies into ordinary, pageable CPU tensors)
//   write_s        = max over nodes of sum of the node's shard_bytes / storage_write_bandwidth
//   sync:  exposed = d2h_s + write_s           (training waits for the whole save)
//   async: exposed = d2h_s + max(0, write_s - every x step_time_s)
//                    (staging blocks; the write overlaps the next `every` steps, and the next
//                    save waits for whatever is left of it, as DCP's caller waits on the future)
//   amortised per step = exposed / every; host staging (async) = the largest shard_bytes.
// The commit (metadata, fsyncs) and the file system's latency are not modelled. Nothing here
// touches device memory: the device predictions do not change.
//
// NOTE [Checkpoint storage bandwidth]: the hardware profiles hold no storage figure. The
// default, 2e9 bytes/s per node, is an assumption (about one local NVMe SSD's sequential
// write, or a share of a parallel file system), not a measurement: set
// training.checkpoint.storage_write_bandwidth (or `plan --storage-write-bandwidth`) to your
// storage's figure.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"

namespace fullshard::sim {

struct CheckpointCost {
  int every = 0;
  bool async = false;
  double d2h_bandwidth = 0;            // bytes/s (the profile's pageable_copy_bandwidth)
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
};

// The cost of s.training.checkpoint at step time `step_time_s`. Requires every > 0.
CheckpointCost checkpoint_cost(const Scenario& s, double step_time_s);

// Each rank's unpadded local shard bytes of parameters and AdamW states (0 for ranks that do
// not write: replicas other than the first).
std::vector<uint64_t> checkpoint_shard_bytes(const Scenario& s);

nlohmann::json checkpoint_cost_json(const CheckpointCost& c);

}  // namespace fullshard::sim
