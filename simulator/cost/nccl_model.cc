#include "simulator/cost/nccl_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/common/error.h"

namespace fullshard::sim::nccl {
namespace {

// NOTE [NCCL tables]: the constants below are NCCL's own tuning constants (NVIDIA/nccl
// src/graph/tuning.cc, v2.30.7: ncclTunerConstantsDefaults, nvlsEfficiency and
// treeCorrectionFactor), written here as data in fullshard's algorithm order {Tree, Ring,
// NVLS, NVLSTree, PAT} and protocol order {LL, LL128, Simple}; CollNet rows are dropped.
// They are software constants of NCCL, the same on every machine (per-architecture rows are
// picked by NcclPlatform::arch), so they live here and not in the hardware profiles.
constexpr int kTree = 0, kRing = 1, kNvls = 2, kNvlsTree = 3, kPat = 4;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
using Row = std::array<double, kNumProtos>;
using AlgoRows = std::array<Row, kNumAlgos>;

// Base latency of every call, us.
constexpr AlgoRows kBaseLatency = {
    {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {8.0, 8.0, 8.0}}};
// Per-hop latency by link type, us.
constexpr AlgoRows kNvlinkLatency = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}}};
constexpr AlgoRows kPciLatency = {
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}}};
constexpr AlgoRows kNetLatency = {
    {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}}};
// Per-architecture caps, GB/s, indexed [arch][min(nNodes, 3) - 1].
using ArchCaps = std::array<std::array<double, 3>, 4>;
// LL: row = arch for one node; multi-node rows are by CPU vendor (0 Intel, 1 AMD).
constexpr ArchCaps kLLMaxBw = {
    {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}}};
constexpr ArchCaps kPerChMaxRingLL128Bw = {
    {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}}};
constexpr ArchCaps kPerChMaxTreeLL128Bw = {
    {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}}};
constexpr ArchCaps kPerChMaxTreeBw = {
    {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}}};
constexpr ArchCaps kPerChMaxNvlsTreeBw = {
    {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0, 57.7, 45.5}, {0, 96.0, 80.0}}};
// Tree all-reduce bandwidth correction for medium sizes, by log2(bytes / 64), per protocol.
constexpr std::array<std::array<double, 24>, kNumProtos> kTreeCorrection = {{
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6,  .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6,  .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
     .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
}};
constexpr double kInf = std::numeric_limits<double>::infinity();

int log2i(long long n) {  // floor(log2(n)), -1 for n <= 0 (NCCL's log2i)
  int l = -1;
  while (n > 0) {
    n >>= 1;
    ++l;
  }
  return l;
}

bool is_ag_rs(Func f) { return f == Func::kAllGather || f == Func::kReduceScatter; }

// Which (algorithm, function) pairs NCCL's tuner considers at all.
bool algo_applies(int a, Func f) {
  if (f == Func::kBroadcast) return a == kRing;
  if (is_ag_rs(f)) return a == kRing || a == kNvls || a == kPat;
  return a != kPat;  // all-reduce
}

}  // namespace

const char* func_name(Func f) {
  switch (f) {
    case Func::kBroadcast: return "broadcast";
    case Func::kAllGather: return "all_gather";
    case Func::kReduceScatter: return "reduce_scatter";
    case Func::kAllReduce: return "all_reduce";
  }
  return "?";
}

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kTree: return "tree";
    case Algo::kRing: return "ring";
    case Algo::kNvls: return "nvls";
    case Algo::kNvlsTree: return "nvls_tree";
    case Algo::kPat: return "pat";
  }
  return "?";
}

const char* proto_name(Proto p) {
  switch (p) {
    case Proto::kLL: return "ll";
    case Proto::kLL128: return "ll128";
    case Proto::kSimple: return "simple";
  }
  return "?";
}

NcclPlatform platform_from(const HardwareProfile& p) {
  NcclPlatform n;
  n.compute_capability = p.compute_capability;
  n.arch = p.compute_capability >= 100  ? 3
           : p.compute_capability >= 90 ? 2
           : p.compute_capability >= 80 ? 1
                                        : 0;
  n.nvlink = p.intra_node_link == IntraNodeLink::kNvlink;
  n.intra_bus_gbs = p.intra_node_bus_bandwidth / 1e9;
  n.net_bus_gbs = p.network_bus_bandwidth / 1e9;
  n.nchannels = p.nccl_channels;
  n.nvls = p.nvls;
  n.nvls_efficiency = p.nvls_efficiency;
  n.amd_cpu = p.host_cpu == HostCpu::kAmd;
  n.x86_cpu = p.host_cpu != HostCpu::kArm;
  n.net_overhead_us = n.amd_cpu ? 2.0 : 1.0;
  return n;
}

TuningTable tune(const NcclPlatform& P, const GroupTopology& G, Func func) {
  TuningTable t;
  const int n = G.nranks, nodes = std::max(G.nnodes, 1);
  if (n <= 1) return t;
  const double ppn = G.ppn();
  const int cc = P.arch;
  const int idx2 = nodes <= 2 ? nodes - 1 : 2;
  const int ll_row = nodes == 1 ? cc : (P.amd_cpu ? 1 : 0);
  const double ll_max = kLLMaxBw[static_cast<size_t>(ll_row)][static_cast<size_t>(idx2)];
  const double nch = P.nchannels;
  // NOTE [Graph bandwidth]: NCCL's graph search gives each channel one speed on every link of
  // its path (bwIntra = bwInter for rings), so a ring's bus bandwidth is the intra-node bus
  // bandwidth, or in a multi-node communicator the NICs the bottleneck node can drive
  // (min_ppn GPUs, one NIC each, rail-optimised) if that is lower. For trees across 2 nodes
  // and for NVLS the search may raise one side to twice the other; that is kept.
  const double net_total = G.min_ppn * P.net_bus_gbs;
  const double ring_bus = nodes == 1 ? P.intra_bus_gbs : std::min(P.intra_bus_gbs, net_total);
  const double tree_bus = nodes == 1   ? P.intra_bus_gbs
                          : nodes == 2 ? std::min(P.intra_bus_gbs, 2 * net_total)
                                       : std::min(P.intra_bus_gbs, net_total);
  const int nsteps = func == Func::kAllReduce ? 2 * (n - 1) : is_ag_rs(func) ? n - 1 : n;
  const AlgoRows& intra_lat = P.nvlink ? kNvlinkLatency : kPciLatency;

  for (int a = 0; a < kNumAlgos; ++a) {
    if (!algo_applies(a, func)) continue;
    for (int p = 0; p < kNumProtos; ++p) {
      if ((a == kNvls || a == kNvlsTree || a == kPat) && p != kSimple) continue;
      // ---- enable rules (defaults, no NCCL_ALGO / NCCL_PROTO)
      bool enabled = true;
      // NVLS needs >= 2 GPUs of the communicator in the node (ncclNvlsInit) and 2 channels;
      // multi-node NVLS (not NVLS-tree) needs CollNet, which is off.
      const bool nvls_ok = P.nvls && G.min_ppn >= 2 && P.nchannels >= 2;
      if (a == kNvls) enabled = nvls_ok && nodes == 1;
      if (a == kNvlsTree) enabled = nvls_ok && nodes > 1;
      if (a == kPat) enabled = P.compute_capability >= 60 && nodes == n;  // one GPU per node
      // LL128 needs NVLink inside the node (typeIntra <= NVB) and Volta or later.
      if (p == kLL128) enabled = enabled && P.nvlink && P.compute_capability >= 70;
      if (!enabled) continue;

      // ---- bus bandwidth
      double bus = a == kTree ? tree_bus : ring_bus;
      if (a == kNvls || a == kNvlsTree) {
        const double intra_ch = P.intra_bus_gbs / nch;
        double intra_bw = intra_ch * P.nvls_efficiency * (nch - 1) / nch;
        intra_bw *= func == Func::kAllReduce ? 2.0 : (ppn - 1) / ppn;
        const double inter_ch = nodes == 1 ? 2 * intra_ch : net_total / nch;
        const double inter_bw = inter_ch * (nodes <= 2 && a == kNvlsTree ? 2 : 1);
        const double cap =
            a == kNvlsTree ? kPerChMaxNvlsTreeBw[static_cast<size_t>(cc)][static_cast<size_t>(idx2)]
                           : kInf;
        bus = nch * std::min({intra_bw, inter_bw, cap});
        // NVLS all-gather / reduce-scatter across nodes needs CollNet (disabled above).
      }
      if (a == kRing && p == kLL) bus = std::min(ll_max, bus * 0.5);
      if (a == kRing && p == kLL128)
        bus = std::min(
            bus * 0.92,
            nch * kPerChMaxRingLL128Bw[static_cast<size_t>(cc)][static_cast<size_t>(idx2)]);
      if (a == kTree && func == Func::kAllReduce)
        bus = std::min(bus * 0.92,
                       nch * kPerChMaxTreeBw[static_cast<size_t>(cc)][static_cast<size_t>(idx2)]);
      if (a == kTree && p == kLL) bus = std::min(bus / 3.8, ll_max);
      if (a == kTree && p == kLL128)
        bus = std::min(
            bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
            nch * kPerChMaxTreeLL128Bw[static_cast<size_t>(cc)][static_cast<size_t>(idx2)]);
      if (a == kPat) bus *= 0.75;
      // ---- bus bandwidth -> algorithm bandwidth (not for non-ring all-gather / reduce-scatter)
      if (!(a != kRing && is_ag_rs(func))) {
        if (a == kRing || a == kNvls || a == kNvlsTree) {
          bus *= static_cast<double>(n) / nsteps;
        } else {
          bus *= 0.5;
        }
      }
      // ---- latency
      const double intra = intra_lat[static_cast<size_t>(a)][static_cast<size_t>(p)];
      // With one rank per node the network latency is fully exposed: NCCL uses the tree's.
      const double inter = ppn == 1 ? kNetLatency[kTree][static_cast<size_t>(p)]
                                    : kNetLatency[static_cast<size_t>(a)][static_cast<size_t>(p)];
      double lat = kBaseLatency[static_cast<size_t>(a)][static_cast<size_t>(p)];
      if (a == kRing) {
        if (func == Func::kBroadcast) {
          lat += (nodes == 1 ? intra : kNetLatency[kRing][static_cast<size_t>(p)]);
        } else {
          double net_overhead = 0;
          if (nodes > 1) net_overhead = P.net_overhead_us * (p == kSimple ? 3 : 1);
          const double intra_eff = std::max(intra, net_overhead);
          const int inter_steps = nodes == 1                 ? 0
                                  : func == Func::kAllReduce ? 2 * (nodes - 1)
                                                             : nodes - 1;
          lat += (nsteps - inter_steps) * intra_eff + inter_steps * inter;
        }
      } else if (a == kTree) {
        if (func == Func::kAllReduce) lat += 2 * ((n / nodes - 1) * intra + log2i(nodes) * inter);
      } else if (a == kNvls) {
        lat = intra + (nodes > 1 ? inter : 0);
      } else if (a == kNvlsTree) {
        lat += intra + 2 * log2i(nodes) * inter;
      } else if (a == kPat) {
        lat += log2i(nodes) * (inter / 3.5) + n * 2.8;
      }
      t.latency_us[static_cast<size_t>(a)][static_cast<size_t>(p)] = lat;
      t.bandwidth_gbs[static_cast<size_t>(a)][static_cast<size_t>(p)] = bus;
    }
  }
  return t;
}

double algo_time_us(const TuningTable& t, const NcclPlatform& P, const GroupTopology& G, Func func,
                    Algo algo, Proto proto, double bytes) {
  const size_t a = static_cast<size_t>(algo), p = static_cast<size_t>(proto);
  double bw = t.bandwidth_gbs[a][p];
  double lat = t.latency_us[a][p];
  if (bw <= 0) return -1;
  const int log_size = log2i(static_cast<long long>(bytes) >> 6);
  if (algo == Algo::kTree && func == Func::kAllReduce && log_size >= 0 && log_size < 23)
    bw *= kTreeCorrection[p][static_cast<size_t>(log_size)];
  if (algo == Algo::kNvlsTree && func == Func::kAllReduce && log_size >= 0 && log_size < 24 &&
      P.compute_capability >= 100 && P.x86_cpu)
    bw *= kTreeCorrection[p][static_cast<size_t>(log_size)];
  // Plateau of multi-node Simple rings.
  if (algo == Algo::kRing && proto == Proto::kSimple && G.nnodes > 1 && func == Func::kAllReduce &&
      bytes / (static_cast<double>(P.nchannels) * G.nranks) >= 64)
    lat *= P.compute_capability < 80 ? 1.9 : 1.4;
  return lat + bytes / (1000.0 * bw);
}

Choice choose(const TuningTable& t, const NcclPlatform& P, const GroupTopology& G, Func func,
              double bytes) {
  Choice best;
  if (G.nranks <= 1) return best;
  double min_time = kInf;
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int p = 0; p < kNumProtos; ++p) {
      const double time =
          algo_time_us(t, P, G, func, static_cast<Algo>(a), static_cast<Proto>(p), bytes);
      if (time >= 0 && time < min_time) {
        min_time = time;
        best = Choice{static_cast<Algo>(a), static_cast<Proto>(p), time};
      }
    }
  }
  FULLSHARD_CHECK(min_time < kInf, std::string("no NCCL algorithm for ") + func_name(func));
  return best;
}

double all_to_all_time_us(const NcclPlatform& P, const GroupTopology& G, double send_bytes,
                          double recv_bytes) {
  const int n = G.nranks;
  if (n <= 1) return 0;
  const int nodes = std::max(G.nnodes, 1);
  const double ppn = G.ppn(), per_peer = std::max(send_bytes, recv_bytes) / (n - 1);
  const double intra = per_peer * std::max(0.0, ppn - 1), inter = per_peer * (n - ppn);
  const AlgoRows& intra_lat = P.nvlink ? kNvlinkLatency : kPciLatency;
  const double hop = nodes > 1 ? kNetLatency[kRing][kSimple] : intra_lat[kRing][kSimple];
  double t = 0;
  if (intra > 0 && P.intra_bus_gbs > 0) t = std::max(t, intra / (1000.0 * P.intra_bus_gbs));
  if (inter > 0 && P.net_bus_gbs > 0) t = std::max(t, inter / (1000.0 * P.net_bus_gbs));
  return kBaseLatency[kRing][kSimple] + hop + t;
}

double permute_time_us(const NcclPlatform& P, const GroupTopology& G, double bytes) {
  if (G.nranks <= 1) return 0;
  const bool across = G.nnodes > 1;
  const AlgoRows& intra_lat = P.nvlink ? kNvlinkLatency : kPciLatency;
  const double hop = across ? kNetLatency[kRing][kSimple] : intra_lat[kRing][kSimple];
  const double gbs = across ? P.net_bus_gbs : P.intra_bus_gbs;
  return kBaseLatency[kRing][kSimple] + hop + (gbs > 0 ? bytes / (1000.0 * gbs) : 0.0);
}

Choice choose(const NcclPlatform& P, const GroupTopology& G, Func func, double bytes) {
  return choose(tune(P, G, func), P, G, func, bytes);
}

}  // namespace fullshard::sim::nccl
