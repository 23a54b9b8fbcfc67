#pragma once
// NCCL's own cost model, as its tuner uses it to pick an algorithm and protocol per call
// (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel + ncclTopoGetAlgoTime, v2.30.7):
//   time = latency(algorithm, protocol) + bytes / algorithm_bandwidth(algorithm, protocol)
// with the latency from per-hop tables and the bandwidth from the topology's bus bandwidth,
// derated per protocol and converted to algorithm bandwidth per collective. Pure functions;
// the machine comes in as an NcclPlatform (built from a HardwareProfile) and the group as a
// GroupTopology. docs/cost-model.md explains every term and what is left out (CollNet, the
// per-size channel and thread choice).
#include <array>
#include <cstdint>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/topology.h"

namespace fullshard::sim::nccl {

enum class Func : uint8_t { kBroadcast, kAllGather, kReduceScatter, kAllReduce };
// CollNet (SHARP-capable InfiniBand switches) is not modelled: NCCL disables it unless the
// collnet plugin is configured.
enum class Algo : uint8_t { kTree, kRing, kNvls, kNvlsTree, kPat };
enum class Proto : uint8_t { kLL, kLL128, kSimple };
constexpr int kNumAlgos = 5;
constexpr int kNumProtos = 3;

const char* func_name(Func f);    // "all_gather", ...
const char* algo_name(Algo a);    // "tree", "ring", "nvls", "nvls_tree", "pat"
const char* proto_name(Proto p);  // "ll", "ll128", "simple"

// What NCCL's tuner knows about the machine.
struct NcclPlatform {
  int arch = 2;  // NCCL's compCapIndex: 0 Volta (and non-GPUs), 1 Ampere, 2 Hopper, 3 Blackwell
  int compute_capability = 90;
  bool nvlink = true;        // intra-node link type: NVLink (else PCI) for the latency tables
  double intra_bus_gbs = 0;  // nChannels x bwIntra: ring bus bandwidth inside a node, GB/s
  double net_bus_gbs = 0;    // what one GPU's NIC gives NCCL, GB/s
  int nchannels = 16;
  bool nvls = false;
  double nvls_efficiency = 0;
  bool amd_cpu = false;        // NCCL's AMD rows (LL bandwidth, network overhead)
  bool x86_cpu = true;         // Intel or AMD host (NCCL's Blackwell NVLS-tree correction)
  double net_overhead_us = 1;  // getNetOverhead: 1 us Intel / Arm, 2 us AMD
};
NcclPlatform platform_from(const HardwareProfile& p);

// NCCL's latency (us) and algorithm bandwidth (GB/s) of every (algorithm, protocol) for one
// communicator and function, after the enable rules; bandwidth 0 = not available.
struct TuningTable {
  std::array<std::array<double, kNumProtos>, kNumAlgos> latency_us{};
  std::array<std::array<double, kNumProtos>, kNumAlgos> bandwidth_gbs{};
};
TuningTable tune(const NcclPlatform& platform, const GroupTopology& group, Func func);

// ncclTopoGetAlgoTime for one call of `bytes` (NCCL's nBytes: the whole buffer, i.e. the
// all-gather output / reduce-scatter input). Negative when (algo, proto) is unavailable.
double algo_time_us(const TuningTable& table, const NcclPlatform& platform,
                    const GroupTopology& group, Func func, Algo algo, Proto proto, double bytes);

struct Choice {
  Algo algo = Algo::kRing;
  Proto proto = Proto::kSimple;
  double time_us = 0;  // 0 for a single-rank group (NCCL runs nothing)
};
// The fastest available (algorithm, protocol), as NCCL's default tuner picks it; ties go to
// the first in (algorithm, protocol) enum order, as NCCL's loop keeps the first minimum.
Choice choose(const TuningTable& table, const NcclPlatform& platform, const GroupTopology& group,
              Func func, double bytes);
Choice choose(const NcclPlatform& platform, const GroupTopology& group, Func func, double bytes);

// NOTE [All-to-all cost]: NCCL has no all-to-all algorithm: PyTorch's all_to_all_single on
// ProcessGroupNCCL is ncclGroupStart, one ncclSend and one ncclRecv per peer, ncclGroupEnd
// (torch/csrc/cuda/nccl.cpp all2all_single_unequal_split), and NCCL's tuner prices only
// collectives, so this is fullshard's model of the grouped point-to-point transfers, per rank:
//   time = base + hop + max(intra / intra_bus, inter / net_bus)
//   intra = max(send, recv) / (n - 1) x (ppn - 1),  inter = max(send, recv) / (n - 1) x (n - ppn)
// send / recv: the bytes this rank sends to / receives from the other members (its own chunk is
// a local copy); each peer's chunk crosses the link between the two ranks, NVLink inside a node
// (the node's bus bandwidth, NcclPlatform::intra_bus_gbs) and the NIC across nodes (net_bus_gbs),
// both at once. base + hop: NCCL's Simple-protocol base latency plus one hop of the link class
// the group spans (its Ring rows). Per-peer chunks are taken as equal: exact for balanced
// routing, and for the receive side under skew (every rank routes alike, NOTE [Expert-parallel
// routing]); the engine takes the slowest member, the rank receiving the most.
double all_to_all_time_us(const NcclPlatform& platform, const GroupTopology& group,
                          double send_bytes, double recv_bytes);

// NOTE [Permute cost]: context parallelism's K / V rotation is funcol's permute_tensor, an
// all_to_all_single in which each rank sends its whole buffer to the next rank of the group
// (one ncclSend and one ncclRecv per rank). Every link of the ring carries `bytes` at once, so
// a rank's time is base + hop + bytes over its link: NVLink (intra_bus_gbs) when the group is
// inside a node, else the NIC (net_bus_gbs), which the ring's node-crossing ranks wait for and
// the engine's slowest member takes.
double permute_time_us(const NcclPlatform& platform, const GroupTopology& group, double bytes);

}  // namespace fullshard::sim::nccl
