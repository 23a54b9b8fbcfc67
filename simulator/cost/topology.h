#pragma once
// Where a collective's ranks sit: nodes x GPUs per node, and how a process group spreads over
// them. NCCL's tuner sees a communicator as (nRanks, nNodes) and derives ranks per node from
// them; fullshard derives both from the group's global ranks and the cluster layout. Pure
// functions (docs/cost-model.md, "Topology").
#include <vector>

namespace fullshard::sim {

// NOTE [Rank placement]: torchrun's default: global rank r is local rank r % gpus_per_node on
// node r / gpus_per_node. A DeviceMesh is laid out row-major over global ranks, so in an HSDP
// mesh [R, S] with S dividing gpus_per_node each shard group lives in one node and each
// replicate group has one rank per node.
struct ClusterLayout {
  int nodes = 1;
  int gpus_per_node = 1;
  int world() const { return nodes * gpus_per_node; }
  int node_of(int rank) const { return rank / gpus_per_node; }
};

// A process group as NCCL's cost model sees it.
struct GroupTopology {
  int nranks = 0;
  int nnodes = 0;   // distinct nodes holding a member
  int min_ppn = 0;  // fewest members on one of those nodes (the bottleneck node's NICs)
  int max_ppn = 0;  // most members on one node
  // Ranks per node as NCCL computes it (nRanks / nNodes, fractional when uneven).
  double ppn() const { return nnodes > 0 ? static_cast<double>(nranks) / nnodes : 0.0; }
  bool single_node() const { return nnodes <= 1; }
  bool operator==(const GroupTopology&) const = default;
};

// Throws InternalError (FULLSHARD_CHECK) for a rank outside the layout or a duplicate rank.
GroupTopology group_topology(const std::vector<int>& ranks, const ClusterLayout& layout);

}  // namespace fullshard::sim
