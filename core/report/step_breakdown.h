#pragma once
// One step of one rank: per-stream busy time, compute, communication and exposed communication
// inside the step's window, and the step's time split by what it ran through
// (docs/report-format.md, "last_step"). The simulator fills it by walking its critical path
// (simulator/step_breakdown.h); a real run fills it from the streams' measured busy intervals
// (measured_step_breakdown below). Both write it with step_breakdown_json.
#include <array>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/runtime/backend.h"

namespace fullshard {

// Critical-path categories, in report order.
enum class PathKind : uint8_t {
  kCompute,        // device kernels on the compute stream
  kDeviceCopy,     // device kernels on other streams (all-gather copy-in)
  kCommunication,  // collectives
  kHostLink,       // host <-> device copies (CPU offload)
  kCpu,            // CPU work (the offloaded optimizer step)
  kLaunch,         // the device waited for the host to launch work
  kPeerWait,       // a collective waited for other ranks to arrive
};
constexpr int kNumPathKinds = 7;
const char* path_kind_name(PathKind k);  // "compute", "device_copy", ...

// The mesh dims a collective's group spans, for per-dimension communication time: shard
// (FSDP's all-gathers and reduce-scatters, post-forward groups, clipping), replicate (HSDP's
// all-reduce), tp (tensor parallelism's collectives on the compute stream), pp (pipeline
// stages' send / recv and the gradient norm's pp all-reduce; in reports only when nonzero), cp
// (ring attention's K / V exchange; in reports only when nonzero).
enum class MeshDimKind : uint8_t { kShard, kReplicate, kTp, kPp, kCp };
constexpr int kNumMeshDimKinds = 5;
constexpr bool mesh_dim_is_optional(MeshDimKind k) {
  return k == MeshDimKind::kPp || k == MeshDimKind::kCp;
}
const char* mesh_dim_kind_name(MeshDimKind k);
// By the group's name ("tp", "replicate", "shard", "shard+tp", "shard/post_forward[2]", "pp",
// "pipeline p2p F 0->1", "cp"): "tp" is tp, a name starting with "replicate" is replicate, "pp"
// or one starting with "pipeline p2p" is pp, "cp" is cp, everything else shard.
MeshDimKind mesh_dim_of_group(const std::string& group_name);

struct StepBreakdown {
  double begin_s = 0, end_s = 0;  // the window: host time at the previous and this step end
  std::array<double, kNumStreams> stream_busy_s{};  // busy time inside the window
  double compute_s = 0;       // compute stream busy with kernels (not collectives)
  double comm_s = 0;          // union of communication: collectives (any stream), comm streams
  double exposed_comm_s = 0;  // communication while no compute kernel runs
  // Per mesh dim (MeshDimKind): the union of its collectives' time, and the part of it no
  // compute kernel covers (measured steps: from the backend's collective intervals).
  std::array<double, kNumMeshDimKinds> comm_by_dim_s{}, exposed_comm_by_dim_s{};
  std::array<double, kNumPathKinds> critical_path_s{};  // sums to end_s - begin_s
};

// NOTE [Measured step breakdown]: a real backend reports when each stream was busy, not what
// waited for what, so a measured step's time is split by precedence over the busy streams:
// each moment of the window counts as `compute` when the compute stream runs, else
// `communication` when a collective stream (all_gather, reduce_scatter, all_reduce) runs, else
// `device_copy` (all_gather_copy_in), else `host_link` (host_to_device, device_to_host), else
// `launch` (no stream busy: the device waited for the host). A collective's wait for late
// peers is inside its busy time, so `peer_wait` stays 0 on measured steps, and `cpu` (the
// offloaded optimizer, host work) shows as `launch`. The split sums to the window, as the
// simulator's does; where compute overlaps communication both count once, as compute.
// Intervals are clipped to [begin_s, end_s]. `collectives` (the backend's, when it measures
// them) moves the compute stream's collectives (tensor parallelism's, the loss-parallel
// all-reduces, the tp gradient all-reduces) from compute to communication, and splits
// communication by the mesh dim of each collective's group (mesh_dim_of_group).
StepBreakdown measured_step_breakdown(const StreamIntervals& busy, double begin_s, double end_s,
                                      const std::vector<CollectiveInterval>& collectives = {});

// The report's "last_step" object (rank: whose step it is, a class representative).
nlohmann::json step_breakdown_json(const StepBreakdown& b, int rank);
// Its inverse (the measured one travels from a worker to the launcher as JSON). Throws
// InputError naming the field.
StepBreakdown step_breakdown_from_json(const nlohmann::json& j);

}  // namespace fullshard
