#include "simulator/cost/hardware_cost_model.h"

#include <algorithm>

#include "core/common/error.h"

namespace fullshard::sim {
namespace {

// torch.distributed.barrier on NCCL all-reduces a one-element tensor.
constexpr double kBarrierBytes = 4;

nccl::Func func_of(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather: return nccl::Func::kAllGather;
    case CollectiveKind::kReduceScatter: return nccl::Func::kReduceScatter;
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBarrier: return nccl::Func::kAllReduce;
    case CollectiveKind::kBroadcast: return nccl::Func::kBroadcast;
    case CollectiveKind::kAllToAll: break;  // not an NCCL collective (NOTE [All-to-all cost])
  }
  return nccl::Func::kAllReduce;
}

}  // namespace

HardwareCostModel::HardwareCostModel(const HardwareProfile& hw, const ClusterLayout& layout,
                                     ComputeOptions compute)
    : compute_(hw, compute), layout_(layout), platform_(nccl::platform_from(hw)) {}

double HardwareCostModel::kernel_seconds(const Instr& kernel) const {
  return compute_.kernel_seconds(kernel);
}

double HardwareCostModel::launch_seconds(const Instr& op) const {
  if (op.type == InstrType::kKernel) return compute_.launch_seconds(op);
  const HardwareProfile& hw = compute_.hardware();
  return hw.launch_overhead_s + hw.eager_dispatch_s;
}

// NOTE [FSDP hook host cost]: FSDP2's hooks are Python (FSDPState._pre_forward /
// _post_forward, FSDPParamGroup.pre_backward / post_backward): besides the kernels and
// collectives they launch (each already costs its launch and eager dispatch), every call walks
// its parameter group (FSDPParam.to_unsharded / to_sharded set each parameter's tensor,
// DTensor wrappers are made, autograd hooks registered on the outputs). That host time is what
// makes small-unit models CPU-bound (pytorch/pytorch#173680: FSDP pre_forward at about 1 ms a
// call on a Xeon with torch 2.10). It is priced per hook call, fsdp_hook_s plus
// fsdp_hook_param_s per parameter of the group, from the profile; the host runs ahead of the
// device, so it only shows where the device waits for the host.
double HardwareCostModel::host_work_seconds(const Instr& work) const {
  const HardwareProfile& hw = compute_.hardware();
  return hw.fsdp_hook_s + std::max(0, work.parts) * hw.fsdp_hook_param_s;
}

const HardwareCostModel::GroupEntry& HardwareCostModel::entry(const GroupInfo& group) const {
  auto it = cache_.find(&group);
  const int first = group.ranks.empty() ? -1 : group.ranks.front();
  const int last = group.ranks.empty() ? -1 : group.ranks.back();
  if (it != cache_.end() && it->second.topology.nranks == static_cast<int>(group.ranks.size()) &&
      it->second.first == first && it->second.last == last)
    return it->second;
  GroupEntry e;
  e.first = first;
  e.last = last;
  e.topology = group_topology(group.ranks, layout_);
  for (int f = 0; f < 4; ++f)
    e.tables[static_cast<size_t>(f)] =
        nccl::tune(platform_, e.topology, static_cast<nccl::Func>(f));
  return cache_[&group] = e;
}

nccl::Choice HardwareCostModel::choice(const Instr& c, const GroupInfo& group) const {
  const GroupEntry& e = entry(group);
  const nccl::Func f = func_of(c.coll);
  const double bytes =
      c.coll == CollectiveKind::kBarrier ? kBarrierBytes : static_cast<double>(c.coll_bytes);
  return nccl::choose(e.tables[static_cast<size_t>(f)], platform_, e.topology, f, bytes);
}

double HardwareCostModel::collective_seconds(const Instr& c, const GroupInfo& group) const {
  // A permute (dims[2] = 1: one peer, context parallelism's ring): NOTE [Permute cost].
  if (c.coll == CollectiveKind::kAllToAll && c.dims[2] == 1)
    return nccl::permute_time_us(platform_, entry(group).topology,
                                 static_cast<double>(std::max(c.dims[0], c.dims[1]))) *
           1e-6;
  if (c.coll == CollectiveKind::kAllToAll)  // dims: bytes sent to / received from the others
    return nccl::all_to_all_time_us(platform_, entry(group).topology,
                                    static_cast<double>(c.dims[0]),
                                    static_cast<double>(c.dims[1])) *
           1e-6;
  return choice(c, group).time_us * 1e-6;
}

CollectiveChoice HardwareCostModel::collective_choice(const Instr& c,
                                                      const GroupInfo& group) const {
  if (group.ranks.size() <= 1) return {};
  if (c.coll == CollectiveKind::kAllToAll) return {"p2p", "simple"};
  const nccl::Choice ch = choice(c, group);
  return {nccl::algo_name(ch.algo), nccl::proto_name(ch.proto)};
}

KernelComm HardwareCostModel::kernel_comm(const Instr& k) const {
  if (k.type != InstrType::kKernel ||
      (k.op != OpKind::kAllGatherMatmul && k.op != OpKind::kMatmulReduceScatter))
    return {};
  const CollectiveMatmulTimes t = compute_.collective_matmul(k);
  return {t.comm_s, std::max(0.0, t.total_s - t.compute_s)};
}

CollectiveLoad HardwareCostModel::collective_load(const Instr& c, const GroupInfo& group) const {
  const GroupTopology& t = entry(group).topology;
  if (t.nranks <= 1) return {};
  const HardwareProfile& hw = compute_.hardware();
  if (t.single_node()) return {0, hw.overlap_slowdown_nvlink};
  return {1, hw.overlap_slowdown_network};
}

}  // namespace fullshard::sim
