#include "core/report/step_breakdown.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/common/intervals.h"

namespace fullshard {
namespace {

using json = nlohmann::json;

std::vector<Interval> clipped(const std::vector<Interval>& v, double lo, double hi) {
  std::vector<Interval> out;
  for (const auto& [a, b] : v) {
    const double s = std::max(a, lo), e = std::min(b, hi);
    if (e > s) out.emplace_back(s, e);
  }
  return out;
}

std::vector<Interval> streams(const StreamIntervals& busy, std::initializer_list<StreamRole> roles,
                              double lo, double hi) {
  std::vector<Interval> out;
  for (StreamRole r : roles) {
    auto c = clipped(busy[static_cast<size_t>(r)], lo, hi);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

double number(const json& j, const std::string& key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    throw InputError(where + "." + key, it == j.end() ? "is missing" : "is not a number",
                     "write a complete report");
  return it->get<double>();
}

}  // namespace

const char* path_kind_name(PathKind k) {
  switch (k) {
    case PathKind::kCompute: return "compute";
    case PathKind::kDeviceCopy: return "device_copy";
    case PathKind::kCommunication: return "communication";
    case PathKind::kHostLink: return "host_link";
    case PathKind::kCpu: return "cpu";
    case PathKind::kLaunch: return "launch";
    case PathKind::kPeerWait: return "peer_wait";
  }
  return "?";
}

StepBreakdown measured_step_breakdown(const StreamIntervals& busy, double begin_s, double end_s,
                                      const std::vector<CollectiveInterval>& collectives) {
  StepBreakdown b;
  b.begin_s = begin_s;
  b.end_s = std::max(begin_s, end_s);
  for (StreamRole r : kAllStreams)
    b.stream_busy_s[static_cast<size_t>(r)] =
        covered_seconds(clipped(busy[static_cast<size_t>(r)], b.begin_s, b.end_s));
  // The compute stream's own collectives are communication: its busy intervals less those
  // (the backend records each collective's interval in both lists, the same numbers).
  std::multiset<Interval> on_compute;
  std::array<std::vector<Interval>, kNumMeshDimKinds> by_dim;
  for (const CollectiveInterval& c : collectives) {
    if (c.stream == StreamRole::kDefault) on_compute.insert({c.begin_s, c.end_s});
    by_dim[static_cast<size_t>(mesh_dim_of_group(c.group))].emplace_back(c.begin_s, c.end_s);
  }
  std::vector<Interval> kernels;
  for (const Interval& iv : busy[static_cast<size_t>(StreamRole::kDefault)]) {
    auto it = on_compute.find(iv);
    if (it != on_compute.end())
      on_compute.erase(it);
    else
      kernels.push_back(iv);
  }
  const auto compute = clipped(kernels, b.begin_s, b.end_s);
  auto comm = streams(busy,
                      {StreamRole::kAllGather, StreamRole::kReduceScatter, StreamRole::kAllReduce,
                       StreamRole::kContextParallel},
                      b.begin_s, b.end_s);
  for (const CollectiveInterval& c : collectives)
    if (c.stream == StreamRole::kDefault)
      for (const Interval& iv : clipped({{c.begin_s, c.end_s}}, b.begin_s, b.end_s))
        comm.push_back(iv);
  for (int k = 0; k < kNumMeshDimKinds; ++k) {
    const auto dim = clipped(by_dim[static_cast<size_t>(k)], b.begin_s, b.end_s);
    b.comm_by_dim_s[static_cast<size_t>(k)] = covered_seconds(dim);
    b.exposed_comm_by_dim_s[static_cast<size_t>(k)] = uncovered_seconds(dim, compute);
  }
  const auto copy = streams(busy, {StreamRole::kAllGatherCopyIn}, b.begin_s, b.end_s);
  const auto link =
      streams(busy, {StreamRole::kHostToDevice, StreamRole::kDeviceToHost}, b.begin_s, b.end_s);
  b.compute_s = covered_seconds(compute);
  b.comm_s = covered_seconds(comm);
  b.exposed_comm_s = uncovered_seconds(comm, compute);
  // Precedence: each layer counts what the layers above it did not cover.
  auto& path = b.critical_path_s;
  std::vector<Interval> above = compute;
  path[static_cast<size_t>(PathKind::kCompute)] = b.compute_s;
  path[static_cast<size_t>(PathKind::kCommunication)] = b.exposed_comm_s;
  above.insert(above.end(), comm.begin(), comm.end());
  path[static_cast<size_t>(PathKind::kDeviceCopy)] = uncovered_seconds(copy, above);
  above.insert(above.end(), copy.begin(), copy.end());
  path[static_cast<size_t>(PathKind::kHostLink)] = uncovered_seconds(link, above);
  above.insert(above.end(), link.begin(), link.end());
  path[static_cast<size_t>(PathKind::kLaunch)] = (b.end_s - b.begin_s) - covered_seconds(above);
  return b;
}

const char* mesh_dim_kind_name(MeshDimKind k) {
  switch (k) {
    case MeshDimKind::kShard: return "shard";
    case MeshDimKind::kReplicate: return "replicate";
    case MeshDimKind::kTp: return "tp";
    case MeshDimKind::kPp: return "pp";
    case MeshDimKind::kCp: return "cp";
  }
  return "?";
}

MeshDimKind mesh_dim_of_group(const std::string& g) {
  if (g == "tp") return MeshDimKind::kTp;
  if (g == "pp" || g.rfind("pipeline p2p", 0) == 0) return MeshDimKind::kPp;
  if (g == "cp") return MeshDimKind::kCp;
  if (g.rfind("replicate", 0) == 0) return MeshDimKind::kReplicate;
  return MeshDimKind::kShard;
}

json step_breakdown_json(const StepBreakdown& b, int rank) {
  json busy = json::object(), path = json::object();
  for (StreamRole s : kAllStreams)
    if (!stream_is_optional(s) || b.stream_busy_s[static_cast<size_t>(s)] > 0)  // pp / cp only
      busy[std::string(stream_name(s))] = b.stream_busy_s[static_cast<size_t>(s)];
  for (int k = 0; k < kNumPathKinds; ++k)
    path[path_kind_name(static_cast<PathKind>(k))] = b.critical_path_s[static_cast<size_t>(k)];
  json by_dim = json::object();
  for (int k = 0; k < kNumMeshDimKinds; ++k)
    if (!mesh_dim_is_optional(static_cast<MeshDimKind>(k)) ||
        b.comm_by_dim_s[static_cast<size_t>(k)] > 0)
      by_dim[mesh_dim_kind_name(static_cast<MeshDimKind>(k))] = {
          {"comm_s", b.comm_by_dim_s[static_cast<size_t>(k)]},
          {"exposed_s", b.exposed_comm_by_dim_s[static_cast<size_t>(k)]}};
  return {{"rank", rank},
          {"comm_by_dim", by_dim},
          {"begin_s", b.begin_s},
          {"end_s", b.end_s},
          {"step_time_s", b.end_s - b.begin_s},
          {"compute_s", b.compute_s},
          {"comm_s", b.comm_s},
          {"exposed_comm_s", b.exposed_comm_s},
          {"stream_busy_s", busy},
          {"critical_path_s", path}};
}

StepBreakdown step_breakdown_from_json(const json& j) {
  const std::string w = "last_step";
  if (!j.is_object()) throw InputError(w, "is not an object", "write a complete report");
  StepBreakdown b;
  b.begin_s = number(j, "begin_s", w);
  b.end_s = number(j, "end_s", w);
  b.compute_s = number(j, "compute_s", w);
  b.comm_s = number(j, "comm_s", w);
  b.exposed_comm_s = number(j, "exposed_comm_s", w);
  if (j.contains("comm_by_dim") && j["comm_by_dim"].is_object())
    for (int k = 0; k < kNumMeshDimKinds; ++k) {
      const std::string d = mesh_dim_kind_name(static_cast<MeshDimKind>(k));
      if (mesh_dim_is_optional(static_cast<MeshDimKind>(k)) && !j["comm_by_dim"].contains(d))
        continue;  // written only with pipeline / context parallelism
      const json& e = j["comm_by_dim"].contains(d) ? j["comm_by_dim"][d] : json();
      b.comm_by_dim_s[static_cast<size_t>(k)] = number(e, "comm_s", w + ".comm_by_dim." + d);
      b.exposed_comm_by_dim_s[static_cast<size_t>(k)] =
          number(e, "exposed_s", w + ".comm_by_dim." + d);
    }
  const json& busy = j.contains("stream_busy_s") ? j["stream_busy_s"] : json();
  const json& path = j.contains("critical_path_s") ? j["critical_path_s"] : json();
  for (StreamRole s : kAllStreams) {
    const std::string n(stream_name(s));
    if (stream_is_optional(s) && !(busy.is_object() && busy.contains(n)))
      continue;  // written only with pipeline / context parallelism
    b.stream_busy_s[static_cast<size_t>(s)] = number(busy, n, w + ".stream_busy_s");
  }
  for (int k = 0; k < kNumPathKinds; ++k)
    b.critical_path_s[static_cast<size_t>(k)] =
        number(path, path_kind_name(static_cast<PathKind>(k)), w + ".critical_path_s");
  return b;
}

}  // namespace fullshard
