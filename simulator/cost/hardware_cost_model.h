#pragma once
// The simulator's time model for a scenario: kernels by the roofline compute model, collectives
// by NCCL's own cost model over the group's topology, launch overhead, and each collective's
// load (which link class it shares, how much compute it slows) from the hardware profile.
// docs/cost-model.md.
#include <array>
#include <unordered_map>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/compute_model.h"
#include "simulator/cost/nccl_model.h"
#include "simulator/cost/topology.h"
#include "simulator/engine/cost_model.h"

namespace fullshard::sim {

class HardwareCostModel final : public CostModel {
 public:
  HardwareCostModel(const HardwareProfile& hw, const ClusterLayout& layout,
                    ComputeOptions compute = {});

  double kernel_seconds(const Instr& kernel) const override;
  double collective_seconds(const Instr& collective, const GroupInfo& group) const override;
  double launch_overhead_seconds() const override { return compute_.hardware().launch_overhead_s; }
  double storage_write_seconds(const Instr& write) const override {
    return compute_.storage_write_seconds(write);
  }
  // An FSDP hook: fsdp_hook_s + its parameters x fsdp_hook_param_s (NOTE [FSDP hook host cost]).
  double host_work_seconds(const Instr& work) const override;
  // Kernels: the compute model's dispatch + launches (eager PyTorch); collectives: one launch
  // plus the framework's dispatch.
  double launch_seconds(const Instr& op) const override;
  // The (algorithm, protocol) NCCL's tuner picks, e.g. {"ring", "simple"}.
  CollectiveChoice collective_choice(const Instr& collective,
                                     const GroupInfo& group) const override;
  // Link class 0 for a group inside one node, 1 across nodes; compute slowdown
  // overlap_slowdown_nvlink or overlap_slowdown_network accordingly. None for one rank.
  CollectiveLoad collective_load(const Instr& collective, const GroupInfo& group) const override;
  // Async TP's collective-matmuls: their copies and the time their products leave uncovered.
  KernelComm kernel_comm(const Instr& kernel) const override;

  const GroupTopology& topology(const GroupInfo& group) const { return entry(group).topology; }
  const nccl::NcclPlatform& platform() const { return platform_; }

 private:
  struct GroupEntry {
    GroupTopology topology;
    std::array<nccl::TuningTable, 4> tables;  // by nccl::Func
    int first = -1, last = -1;                // the group's first and last rank
  };
  // NOTE [Group cache]: keyed by the GroupInfo's address, which is stable for one engine run
  // (the engine's groups vector does not change while it plays); the rank count and the first
  // and last ranks are checked, so a model reused with another groups vector recomputes.
  const GroupEntry& entry(const GroupInfo& group) const;
  nccl::Choice choice(const Instr& collective, const GroupInfo& group) const;

  ComputeModel compute_;
  ClusterLayout layout_;
  nccl::NcclPlatform platform_;
  mutable std::unordered_map<const GroupInfo*, GroupEntry> cache_;
};

}  // namespace fullshard::sim
