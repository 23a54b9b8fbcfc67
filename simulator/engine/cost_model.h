#pragma once
// How long things take: the timing engine asks a CostModel for every kernel, collective and
// launch. The engine knows nothing about hardware; swap the model to change the machine.
// (NCCL keeps its cost model behind the same kind of seam: ncclTopoGetAlgoTime.)
#include <string>

#include "simulator/engine/program.h"

namespace fullshard::sim {

// How a cost model assumes a collective runs, e.g. {"ring", "simple"}; empty when it has no
// such notion.
// NOTE [Collective choice]: exposed only for exporters (the Chrome trace puts it
// in each collective's args); the engine itself never reads it.
struct CollectiveChoice {
  std::string algorithm;
  std::string protocol;
};

// NOTE [Collective load]: what a running collective does to its members besides taking
// time. `link`: the link class it moves data over (0 inside a node, 1 across nodes, -1 none);
// collectives running at once on the same link class of a rank share its bandwidth, so each
// progresses at 1 / (the most such collectives on any member). `compute_slowdown`: the
// fraction of compute throughput its kernels take (NCCL runs on SMs) from device kernels
// beside it on every member. The engine applies both as rates (NOTE [Rates] in engine.cc).
struct CollectiveLoad {
  int link = -1;
  double compute_slowdown = 0;
};

// NOTE [Communication inside a kernel]: async TP's collective-matmuls (kAllGatherMatmul,
// kMatmulReduceScatter) run a tp all-gather or reduce-scatter inside one compute-stream op,
// pipelined with its products. `comm_s`: the op's communication (its copies and barriers);
// `exposed_s`: the part of the op's time the products do not cover (total - compute). Both as
// the cost model priced the op alone; the step breakdown scales them to the op's played span.
struct KernelComm {
  double comm_s = 0;
  double exposed_s = 0;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Seconds a kernel occupies its stream (Instr::flops, Instr::bytes, Instr::op).
  virtual double kernel_seconds(const Instr& kernel) const = 0;
  // Seconds a collective occupies every member's stream once all members have arrived.
  // `group` is the full group (all its ranks), also in symmetric mode.
  virtual double collective_seconds(const Instr& collective, const GroupInfo& group) const = 0;
  // Host seconds one kernel or collective launch costs (records/waits are free).
  virtual double launch_overhead_seconds() const = 0;
  // Host seconds the host spends issuing this kernel or collective (a framework's dispatch and
  // every CUDA launch behind it). The default: launch_overhead_seconds().
  virtual double launch_seconds(const Instr& op) const { return launch_overhead_seconds(); }
  // NOTE [Collective load]. The default: none (collectives neither share links nor slow
  // compute, and every duration is the cost model's alone).
  virtual CollectiveLoad collective_load(const Instr& collective, const GroupInfo& group) const {
    return {};
  }
  // Seconds a kStorageWrite occupies its rank's checkpoint lane: its node's bytes
  // (Instr::coll_bytes) at the node's storage write bandwidth, which the node's writers share.
  // The default: none (a model without storage writes them in no time).
  virtual double storage_write_seconds(const Instr& write) const { return 0; }
  // Host seconds of a kHostWork instruction (an FSDP hook's Python bookkeeping).
  virtual double host_work_seconds(const Instr& work) const { return 0; }
  // NOTE [Communication inside a kernel]. The default: none.
  virtual KernelComm kernel_comm(const Instr& kernel) const { return {}; }
  // NOTE [Collective choice]. The default: none.
  virtual CollectiveChoice collective_choice(const Instr& collective,
                                             const GroupInfo& group) const {
    return {};
  }
};

struct PlaceholderCostOptions {
  double peak_flops = 989e12;            // flop/s (H100 SXM dense bf16)
  double memory_bandwidth = 3.35e12;     // bytes/s (HBM3)
  double collective_latency_s = 10e-6;   // per ring pass
  double link_bandwidth = 200e9;         // bytes/s each rank sends/receives on the ring
  double launch_overhead_s = 0;          // host seconds per launch
  double storage_write_bandwidth = 2e9;  // bytes/s per node (checkpoint writes)
};

// Roofline kernels and a ring model for collectives, until the NCCL model replaces it:
//   kernel      = max(flops / peak_flops, bytes / memory_bandwidth)
//   all_gather / reduce_scatter = latency + coll_bytes * (n-1)/n / link_bandwidth
//   all_reduce  = 2 * (latency + coll_bytes * (n-1)/n / link_bandwidth)   (RS + AG)
//   broadcast   = latency + coll_bytes / link_bandwidth;  barrier = latency
//   all_to_all  = latency + max(bytes sent, received to / from the others) / link_bandwidth
//   n <= 1      = 0 (nothing crosses a link)
//   storage write = node bytes / storage_write_bandwidth
class PlaceholderCostModel final : public CostModel {
 public:
  // Throws InputError naming the field when a value is not positive (launch overhead >= 0).
  explicit PlaceholderCostModel(PlaceholderCostOptions options = {});
  double kernel_seconds(const Instr& kernel) const override;
  double collective_seconds(const Instr& collective, const GroupInfo& group) const override;
  double launch_overhead_seconds() const override { return options_.launch_overhead_s; }
  double storage_write_seconds(const Instr& write) const override {
    return static_cast<double>(write.coll_bytes) / options_.storage_write_bandwidth;
  }
  // {"ring", ""} for every collective of more than one rank (the model has no protocols).
  CollectiveChoice collective_choice(const Instr& collective,
                                     const GroupInfo& group) const override;
  const PlaceholderCostOptions& options() const { return options_; }

 private:
  PlaceholderCostOptions options_;
};

}  // namespace fullshard::sim
