#include "simulator/step_breakdown.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "core/common/error.h"
#include "core/common/intervals.h"

namespace fullshard::sim {
namespace {

constexpr uint32_t kNone = UINT32_MAX;

bool is_op(InstrType t) { return t == InstrType::kKernel || t == InstrType::kCollective; }
bool on_stream(InstrType t) {
  return is_op(t) || t == InstrType::kRecordEvent || t == InstrType::kWaitEvent;
}

PathKind kind_of(const Instr& in) {
  if (in.type == InstrType::kCollective) return PathKind::kCommunication;
  switch (in.place) {
    case KernelPlace::kHost: return PathKind::kCpu;
    case KernelPlace::kHostToDevice:
    case KernelPlace::kDeviceToHost:
    case KernelPlace::kDeviceToPageableHost: return PathKind::kHostLink;
    case KernelPlace::kDevice: break;
  }
  return in.stream == StreamRole::kDefault ? PathKind::kCompute : PathKind::kDeviceCopy;
}

// NOTE [Critical path]: the walk keeps a cursor time t and explains [begin, t] backwards. On
// the host at instruction k (t = host time on reaching k), each earlier launch cost
// launch_s of host time; a synchronize that blocked hands the walk to the op it waited for. On
// a stream op i (t = its end or a later moment it was waited for), [start_i, t] goes to the op's
// kind, then the walk follows what i started after: the previous op on its stream, the event a
// wait waited for, the host that issued it late, or, for a collective that started after it
// was ready, the collective before it on the same communicator (NOTE [Communicator order] in
// the engine) when that ended later, else the late peers. Every moment of [begin, end] is
// counted once.
class Walker {
 public:
  // `exposed`: per instruction, the seconds at the end of its span that are communication
  // (NOTE [Communication inside a kernel]); empty when none.
  Walker(const Program& p, const RankTiming& rt, double begin, double launch_s,
         std::vector<double> exposed)
      : p_(p), t_(rt.times), begin_(begin), launch_s_(launch_s), exposed_(std::move(exposed)) {
    const size_t n = p.instrs.size();
    prev_.assign(n, kNone);
    ref_.assign(n, kNone);
    comm_prev_.assign(n, kNone);
    std::unordered_map<uint32_t, uint32_t> last_on_group;
    std::array<uint32_t, kNumStreams> last{};
    last.fill(kNone);
    std::unordered_map<uint64_t, uint32_t> record;
    for (uint32_t i = 0; i < n; ++i) {
      const Instr& in = p.instrs[i];
      const int s = static_cast<int>(in.stream);
      if (on_stream(in.type)) {
        prev_[i] = last[static_cast<size_t>(s)];
        last[static_cast<size_t>(s)] = i;
      }
      if (in.type == InstrType::kCollective) {
        auto [it, added] = last_on_group.emplace(in.group, i);
        if (!added) comm_prev_[i] = std::exchange(it->second, i);
      }
      if (in.type == InstrType::kRecordEvent) record[in.event] = i;
      if (in.type == InstrType::kWaitEvent ||
          (in.type == InstrType::kSynchronize && in.event != 0)) {
        auto it = record.find(in.event);
        if (it != record.end()) ref_[i] = it->second;
      }
      if (in.type == InstrType::kSynchronize && in.event == 0) {  // the latest-ending stream
        uint32_t best = kNone;
        for (uint32_t j : last)
          if (j != kNone && t_[j].end != kNotRun && (best == kNone || t_[j].end > t_[best].end))
            best = j;
        ref_[i] = best;
      }
    }
  }

  std::array<double, kNumPathKinds> walk(uint32_t marker, double end) {
    out_.fill(0);
    double t = end;
    bool on_host = true;
    uint32_t k = marker;
    // Each step moves to an earlier instruction; bound the walk anyway.
    for (size_t guard = 0; guard < 4 * p_.instrs.size() + 8 && t > begin_; ++guard) {
      if (on_host) {
        bool handed = false;
        while (k-- > 0 && t > begin_) {
          const Instr& in = p_.instrs[k];
          const InstrTime& tm = t_[k];
          if (tm.issue == kNotRun) continue;
          if (is_op(in.type)) {
            add(PathKind::kLaunch, tm.issue - launch_s_, t);
            t = std::min(t, tm.issue - launch_s_);
          } else if (in.type == InstrType::kSynchronize && tm.end > tm.start && ref_[k] != kNone) {
            add(PathKind::kLaunch, tm.end, t);  // launches between the sync and the cursor
            t = std::min(t, tm.end);
            k = ref_[k];
            on_host = false;
            handed = true;
            break;
          }
        }
        if (!handed) {
          add(PathKind::kLaunch, begin_, t);  // the host's start of the run
          t = begin_;
        }
        continue;
      }
      const Instr& in = p_.instrs[k];
      const InstrTime& tm = t_[k];
      const double inner = k < exposed_.size() ? exposed_[k] : 0.0;
      if (inner > 0) {
        const double cut = std::max(tm.start, tm.end - inner);
        add(PathKind::kCommunication, std::max(cut, begin_), t);
        add(kind_of(in), tm.start, std::min(t, cut));
      } else {
        add(kind_of(in), tm.start, t);
      }
      t = std::min(t, tm.start);
      const uint32_t prev = prev_[k];
      const double prev_end = prev != kNone ? t_[prev].end : -1.0;
      double ready = std::max(tm.issue, prev_end);
      if (in.type == InstrType::kWaitEvent && ref_[k] != kNone && t_[ref_[k]].end > ready) {
        k = ref_[k];  // a record ends with the work before it on its stream
        continue;
      }
      if (in.type == InstrType::kCollective && comm_prev_[k] != kNone &&
          t_[comm_prev_[k]].end != kNotRun && t_[comm_prev_[k]].end > ready &&
          (prev == kNone || t_[comm_prev_[k]].end >= prev_end)) {
        // Queued behind the previous collective of its communicator, issued on another stream.
        const uint32_t c = comm_prev_[k];
        if (t_[c].end < t)
          add(PathKind::kPeerWait, t_[c].end, t);  // peers late after the queue cleared
        t = std::min(t, t_[c].end);
        k = c;
        continue;
      }
      if (in.type == InstrType::kCollective && tm.start > ready) {
        add(PathKind::kPeerWait, ready, t);
        t = std::min(t, ready);
      }
      if (prev != kNone && prev_end >= tm.issue) {
        k = prev;
      } else {
        if (is_op(in.type)) {
          add(PathKind::kLaunch, tm.issue - launch_s_, t);
          t = std::min(t, tm.issue - launch_s_);
        }
        on_host = true;  // the host issued k at t: explain the host's time before k
      }
    }
    return out_;
  }

 private:
  void add(PathKind kind, double from, double to) {
    const double a = std::max(from, begin_);
    if (to > a) out_[static_cast<size_t>(kind)] += to - a;
  }

  const Program& p_;
  const std::vector<InstrTime>& t_;
  double begin_;
  double launch_s_;
  std::vector<double> exposed_;
  std::vector<uint32_t> prev_, ref_, comm_prev_;
  std::array<double, kNumPathKinds> out_{};
};

}  // namespace

StepBreakdown step_breakdown(const Program& program, const RankTiming& timing, long begin_marker,
                             long end_marker, double launch_s, const std::vector<GroupInfo>* groups,
                             const CostModel* cost) {
  FULLSHARD_CHECK(end_marker >= 0 && static_cast<size_t>(end_marker) < program.instrs.size() &&
                      begin_marker < end_marker,
                  "bad step markers");
  StepBreakdown b;
  b.begin_s = begin_marker >= 0 ? timing.times[static_cast<size_t>(begin_marker)].start : 0.0;
  b.end_s = timing.times[static_cast<size_t>(end_marker)].start;
  std::vector<std::pair<double, double>> compute, comm;
  std::array<std::vector<std::pair<double, double>>, kNumMeshDimKinds> by_dim;
  std::vector<double> exposed;  // NOTE [Communication inside a kernel], scaled to the played span
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const Instr& in = program.instrs[i];
    const InstrTime& t = timing.times[i];
    if (!is_op(in.type) || t.end == kNotRun) continue;
    const double a = std::max(t.start, b.begin_s), e = std::min(t.end, b.end_s);
    if (e <= a) continue;
    b.stream_busy_s[static_cast<size_t>(in.stream)] += e - a;
    const auto inner = cost ? inner_comm_span(in, t, *cost) : std::nullopt;
    if (inner) {
      if (exposed.empty()) exposed.assign(program.instrs.size(), 0.0);
      exposed[i] = t.end - inner->compute_end;
      if (std::min(inner->compute_end, e) > a)
        compute.emplace_back(a, std::min(inner->compute_end, e));
      const double ca = std::max(inner->comm_begin, b.begin_s);
      if (e > ca) {
        comm.emplace_back(ca, e);
        by_dim[static_cast<size_t>(MeshDimKind::kTp)].emplace_back(ca, e);
      }
      continue;
    }
    switch (op_activity(in)) {
      case OpActivity::kCompute: compute.emplace_back(a, e); break;
      case OpActivity::kComm: comm.emplace_back(a, e); break;
      case OpActivity::kOther: break;
    }
    if (in.type == InstrType::kCollective && groups && in.group < groups->size())
      by_dim[static_cast<size_t>(mesh_dim_of_group((*groups)[in.group].name))].emplace_back(a, e);
  }
  for (const auto& [x, y] : compute) b.compute_s += y - x;  // compute-stream ops never overlap
  // Each list is sorted and merged once (merging a merged list changes nothing): with every
  // rank played this runs per rank over ~10,000 intervals.
  const std::vector<std::pair<double, double>> compute_m = merged_intervals(std::move(compute));
  for (int k = 0; k < kNumMeshDimKinds; ++k) {
    auto dim_m = merged_intervals(std::move(by_dim[static_cast<size_t>(k)]));
    b.comm_by_dim_s[static_cast<size_t>(k)] = uncovered_seconds(dim_m, {});
    b.exposed_comm_by_dim_s[static_cast<size_t>(k)] =
        uncovered_seconds(std::move(dim_m), compute_m);
  }
  auto comm_m = merged_intervals(std::move(comm));
  b.comm_s = uncovered_seconds(comm_m, {});
  b.exposed_comm_s = uncovered_seconds(std::move(comm_m), compute_m);
  b.critical_path_s = Walker(program, timing, b.begin_s, launch_s, std::move(exposed))
                          .walk(static_cast<uint32_t>(end_marker), b.end_s);
  return b;
}

}  // namespace fullshard::sim
