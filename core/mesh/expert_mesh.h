#pragma once
// Expert parallelism's process groups, carved out of the shard group as torchtitan's
// ParallelDims carves them (torchtitan/distributed/parallel_dims.py at pytorch/torchtitan@b5bcd76:
// the sparse mesh ("pp", "dp_replicate", "efsdp", "ep") unflattened from the world).
#include "core/mesh/device_mesh.h"

namespace fullshard {

// NOTE [Expert-parallel mesh]: torchtitan unflattens the world into (pp, dp_replicate, efsdp,
// ep) with efsdp = dp_shard * cp * tp / ep, ep the fastest-varying dim. fullshard has no cp, and
// tp refuses experts, so the sparse region is the shard group: shard index i lies in ep group
// i / ep (ep consecutive shard ranks, which hold every expert once between them) at ep index
// i % ep, and in efsdp group i % ep (the shard ranks holding the same experts) at efsdp index
// i / ep. The replicate dim (HSDP) is untouched: experts are replicated over it as dense
// parameters are. ep must divide the shard group's size (the scenario checks it).
struct ExpertGroups {
  ProcessGroup ep;     // name "ep"
  ProcessGroup efsdp;  // name "efsdp"
};
ExpertGroups expert_groups(const ProcessGroup& shard, int global_rank, int ep);

// FSDP2's shard dim of a routed expert weight over its efsdp ranks (NOTE [Experts' own unit] in
// core/train/apply_fsdp.cc): Shard(1) when efsdp exceeds the experts per ep rank, else Shard(0).
inline int expert_shard_dim(int64_t num_experts, int ep, int efsdp) {
  return static_cast<int64_t>(efsdp) * ep > num_experts ? 1 : 0;
}

}  // namespace fullshard
