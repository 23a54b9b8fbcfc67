#pragma once
// Host memory per node: the pinned host buffers of a node's ranks against its DRAM.
#include <cstdint>
#include <vector>

#include "core/report/rank_report.h"

namespace fullshard::sim {

// NOTE [Host memory per node]: CPU offload (FSDP2's CPUOffloadPolicy) keeps every rank's sharded
// parameters, gradients and optimizer states in host memory, pinned by default, and an async
// checkpoint stages a copy of the shards there too. All ranks of a node share its DRAM, so a
// plan that fits every GPU can still fail on the host: cudaHostAlloc fails or the kernel's OOM
// killer ends a worker. The check sums the ranks' peak host bytes per node (ranks r with the
// same r / gpus_per_node, torchrun's placement). That sum is an upper bound on the node's
// simultaneous use, and a close one: offloaded state lives for the whole run. It counts only
// what the model holds; the OS, the Python processes and the data loader need some more,
// which the profile's figure does not leave room for. A profile that gives no host_memory_bytes
// (0) is not checked.

struct HostMemoryPerNode {
  uint64_t peak_bytes = 0;  // the fullest node: the sum of its ranks' peak host bytes
  int node = 0;             // which node that is
};

// Over `classes` (each with all the ranks it stands for).
HostMemoryPerNode host_memory_per_node(const std::vector<RankReport>& classes, int gpus_per_node);

}  // namespace fullshard::sim
