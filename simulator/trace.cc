#include "simulator/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/tensor/dtype.h"

namespace fullshard::sim {
namespace {

using nlohmann::json;

constexpr int kHostTid = 0;
constexpr int kCheckpointTid =
    1000;  // the checkpoint writer's lane (NOTE [Playing a checkpoint save])
int stream_tid(StreamRole s) { return 1 + static_cast<int>(s); }
double us(double s) { return s * 1e6; }

std::string class_label(const RankClassReport& c) {
  const auto& r = c.ranks;
  if (r.size() == 1) return fmt::format("rank {}", r[0]);
  if (r.back() - r.front() + 1 == static_cast<int>(r.size()))
    return fmt::format("ranks {}-{}", r.front(), r.back());
  return fmt::format("{} ranks ({}, ...)", r.size(), r.front());
}

bool is_copy(const Instr& in) {
  switch (in.op) {
    case OpKind::kCopy:
    case OpKind::kAllGatherCopyIn:
    case OpKind::kAllGatherCopyOut:
    case OpKind::kChunkCat: return true;
    default:
      return in.stream == StreamRole::kHostToDevice || in.stream == StreamRole::kDeviceToHost;
  }
}

// Events of one thread, written in timestamp order (stable: equal times keep their order).
struct Thread {
  std::vector<std::pair<double, std::string>> events;
  void add(double ts, const json& e) { events.emplace_back(ts, e.dump()); }
};

}  // namespace

void write_chrome_trace(const PlayedRun& run, std::ostream& out) {
  std::vector<std::string> meta;
  std::map<std::pair<int, int>, Thread> threads;  // (pid, tid)
  uint64_t next_flow = 1;
  for (size_t pi = 0; pi < run.programs.size(); ++pi) {
    const Program& prog = run.programs[pi];
    const RankTiming& rt = run.result.ranks[pi];
    const RankClassReport* cls = pi < run.report.classes.size() ? &run.report.classes[pi] : nullptr;
    // pid: 1 + the (representative) rank, unique per program (pid 0 is special to some trace
    // tools: the idle process); the process name says which ranks it stands for.
    const int pid = prog.rank + 1;
    const std::string pname = cls ? class_label(*cls) : fmt::format("rank {}", prog.rank);
    meta.push_back(json{{"ph", "M"},
                        {"name", "process_name"},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"name", pname}}}}
                       .dump());
    meta.push_back(json{{"ph", "M"},
                        {"name", "process_sort_index"},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"sort_index", pi}}}}
                       .dump());
    bool used[kNumStreams] = {};
    for (const Instr& in : prog.instrs)
      if (in.type == InstrType::kKernel || in.type == InstrType::kCollective ||
          in.type == InstrType::kWaitEvent)
        used[static_cast<int>(in.stream)] = true;
    meta.push_back(json{{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", kHostTid},
                        {"args", {{"name", "host"}}}}
                       .dump());
    meta.push_back(json{{"ph", "M"},
                        {"name", "thread_sort_index"},
                        {"pid", pid},
                        {"tid", kHostTid},
                        {"args", {{"sort_index", -1}}}}
                       .dump());
    for (StreamRole s : kAllStreams)
      if (used[static_cast<int>(s)]) {
        meta.push_back(json{{"ph", "M"},
                            {"name", "thread_name"},
                            {"pid", pid},
                            {"tid", stream_tid(s)},
                            {"args", {{"name", std::string(stream_name(s))}}}}
                           .dump());
        meta.push_back(json{{"ph", "M"},
                            {"name", "thread_sort_index"},
                            {"pid", pid},
                            {"tid", stream_tid(s)},
                            {"args", {{"sort_index", static_cast<int>(s)}}}}
                           .dump());
      }

    Thread& host = threads[{pid, kHostTid}];
    // NOTE [Trace flows]: a flow starts inside the op that ran before the event record on its
    // stream (the record completes when that op does) and ends at the first op the waiting
    // stream runs after the wait ("f" without "bp": binds to the next slice), so the arrow
    // reads "this op waited for that one". Records with no earlier op on their stream order
    // nothing and get no arrow.
    std::unordered_map<uint64_t, size_t> last_record;  // event -> record instr
    std::vector<size_t> last_op(kNumStreams, SIZE_MAX);
    std::unordered_map<size_t, size_t> prev_op_of_record;
    double step_begin = -1;
    int step_no = 0;
    double save_begin = -1;
    bool checkpoint_lane = false;
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const Instr& in = prog.instrs[i];
      const InstrTime& t = rt.times[i];
      if (t.start < 0) continue;  // never ran (a hang)
      Thread& th = threads[{pid, stream_tid(in.stream)}];
      const std::string name(instr_name(prog, in));
      switch (in.type) {
        case InstrType::kKernel: {
          th.add(us(t.start), json{{"ph", "X"},
                                   {"name", name},
                                   {"cat", is_copy(in) ? "copy" : "compute"},
                                   {"pid", pid},
                                   {"tid", stream_tid(in.stream)},
                                   {"ts", us(t.start)},
                                   {"dur", us(t.end - t.start)},
                                   {"args",
                                    {{"op", op_kind_name(in.op)},
                                     {"flops", in.flops},
                                     {"bytes", in.bytes},
                                     {"step", in.step}}}});
          last_op[static_cast<int>(in.stream)] = i;
          break;
        }
        case InstrType::kCollective: {
          const GroupInfo& g = run.groups.at(in.group);
          json args = {{"collective", collective_kind_str(in.coll)},
                       {"bytes", in.coll_bytes},
                       {"dtype", dtype_name(in.dtype)},
                       {"group", g.name},
                       {"group_size", g.ranks.size()},
                       {"step", in.step}};
          if (in.coll == CollectiveKind::kReduceScatter || in.coll == CollectiveKind::kAllReduce)
            args["reduce_op"] = reduce_op_str(in.reduce);
          if (g.ranks.size() <= 16) args["group_ranks"] = g.ranks;
          const CollectiveChoice choice = run.cost.collective_choice(in, g);
          if (!choice.algorithm.empty()) args["algorithm"] = choice.algorithm;
          if (!choice.protocol.empty()) args["protocol"] = choice.protocol;
          th.add(us(t.start), json{{"ph", "X"},
                                   {"name", name},
                                   {"cat", "collective"},
                                   {"pid", pid},
                                   {"tid", stream_tid(in.stream)},
                                   {"ts", us(t.start)},
                                   {"dur", us(t.end - t.start)},
                                   {"args", args}});
          last_op[static_cast<int>(in.stream)] = i;
          break;
        }
        case InstrType::kRecordEvent:
          last_record[in.event] = i;
          prev_op_of_record[i] = last_op[static_cast<int>(in.stream)];
          break;
        case InstrType::kWaitEvent: {
          auto rec = last_record.find(in.event);
          if (rec == last_record.end()) break;  // waits for nothing (as in CUDA)
          const Instr& r = prog.instrs[rec->second];
          const std::string what = fmt::format("wait for {}", stream_name(r.stream));
          if (t.end > t.start)  // the stream stalled
            th.add(us(t.start), json{{"ph", "X"},
                                     {"name", what},
                                     {"cat", "sync"},
                                     {"pid", pid},
                                     {"tid", stream_tid(in.stream)},
                                     {"ts", us(t.start)},
                                     {"dur", us(t.end - t.start)},
                                     {"args", {{"event", in.event}}}});
          const size_t prev = prev_op_of_record[rec->second];
          if (prev == SIZE_MAX || r.stream == in.stream) break;
          const InstrTime& pt = rt.times[prev];
          const double s_ts = us(pt.end) - std::min(0.5 * us(pt.end - pt.start), 1e-3);
          const uint64_t id = next_flow++;
          threads[{pid, stream_tid(r.stream)}].add(s_ts, json{{"ph", "s"},
                                                              {"name", what},
                                                              {"cat", "event"},
                                                              {"id", id},
                                                              {"pid", pid},
                                                              {"tid", stream_tid(r.stream)},
                                                              {"ts", s_ts}});
          th.add(us(t.end), json{{"ph", "f"},
                                 {"name", what},
                                 {"cat", "event"},
                                 {"id", id},
                                 {"pid", pid},
                                 {"tid", stream_tid(in.stream)},
                                 {"ts", us(t.end)}});
          break;
        }
        case InstrType::kSynchronize:
          host.add(us(t.start), json{{"ph", "X"},
                                     {"name", "synchronize"},
                                     {"cat", "sync"},
                                     {"pid", pid},
                                     {"tid", kHostTid},
                                     {"ts", us(t.start)},
                                     {"dur", us(std::max(0.0, t.end - t.start))}});
          break;
        case InstrType::kStorageWrite: {
          if (!checkpoint_lane) {
            checkpoint_lane = true;
            meta.push_back(json{{"ph", "M"},
                                {"name", "thread_name"},
                                {"pid", pid},
                                {"tid", kCheckpointTid},
                                {"args", {{"name", "checkpoint"}}}}
                               .dump());
            meta.push_back(json{{"ph", "M"},
                                {"name", "thread_sort_index"},
                                {"pid", pid},
                                {"tid", kCheckpointTid},
                                {"args", {{"sort_index", kCheckpointTid}}}}
                               .dump());
          }
          threads[{pid, kCheckpointTid}].add(
              us(t.start),
              json{{"ph", "X"},
                   {"name", name},
                   {"cat", "checkpoint"},
                   {"pid", pid},
                   {"tid", kCheckpointTid},
                   {"ts", us(t.start)},
                   {"dur", us(t.end - t.start)},
                   {"args",
                    {{"bytes", in.bytes}, {"node_bytes", in.coll_bytes}, {"step", in.step}}}});
          break;
        }
        case InstrType::kMarker: {
          if (name == "checkpoint save") save_begin = t.start;
          if (name == "checkpoint end" && save_begin >= 0) {
            host.add(us(save_begin), json{{"ph", "X"},
                                          {"name", "checkpoint save"},
                                          {"cat", "checkpoint"},
                                          {"pid", pid},
                                          {"tid", kHostTid},
                                          {"ts", us(save_begin)},
                                          {"dur", us(t.start - save_begin)},
                                          {"args", {{"step", in.step}}}});
            save_begin = -1;
          }
          host.add(us(t.start), json{{"ph", "i"},
                                     {"name", name},
                                     {"cat", "phase"},
                                     {"s", "t"},
                                     {"pid", pid},
                                     {"tid", kHostTid},
                                     {"ts", us(t.start)},
                                     {"args", {{"step", in.step}}}});
          if (name == "step end") {
            const double b = step_begin < 0 ? 0 : step_begin;
            host.add(us(b), json{{"ph", "X"},
                                 {"name", fmt::format("step {}", step_no++)},
                                 {"cat", "step"},
                                 {"pid", pid},
                                 {"tid", kHostTid},
                                 {"ts", us(b)},
                                 {"dur", us(std::max(0.0, t.start - b))}});
            step_begin = t.start;
          }
          break;
        }
        case InstrType::kHostWork:  // an FSDP hook's Python time on the host lane
          host.add(us(t.start), json{{"ph", "X"},
                                     {"name", name},
                                     {"cat", "fsdp_hook"},
                                     {"pid", pid},
                                     {"tid", kHostTid},
                                     {"ts", us(t.start)},
                                     {"dur", us(std::max(0.0, t.end - t.start))},
                                     {"args", {{"params", in.parts}, {"step", in.step}}}});
          break;
        case InstrType::kAlloc:
        case InstrType::kFree: break;
      }
    }
    // Memory counters from the report's timeline (downsampled keeping the peak).
    if (cls) {
      bool has_host = false;
      for (const auto& p : cls->timeline) has_host = has_host || p.host_bytes > 0;
      Thread& ct = threads[{pid, -1}];  // counters belong to the process; -1 keeps them apart
      for (const auto& p : cls->timeline) {
        json mem = {{"allocated_bytes", p.allocated_bytes}, {"reserved_bytes", p.reserved_bytes}};
        if (has_host) mem["host_bytes"] = p.host_bytes;
        ct.add(us(p.time_s), json{{"ph", "C"},
                                  {"name", "memory"},
                                  {"pid", pid},
                                  {"tid", 0},
                                  {"ts", us(p.time_s)},
                                  {"args", mem}});
        json cats = json::object();
        for (MemCategory k : kAllMemCategories)
          cats[std::string(category_key(k))] = p.by_category[static_cast<int>(k)];
        ct.add(us(p.time_s), json{{"ph", "C"},
                                  {"name", "memory by category"},
                                  {"pid", pid},
                                  {"tid", 0},
                                  {"ts", us(p.time_s)},
                                  {"args", cats}});
      }
    }
  }
  json other = {{"scenario", run.report.scenario},
                {"world_size", run.report.world_size},
                {"time_model", run.report.time_model},
                {"generator", "fullshard simulate --trace"}};
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":" << other.dump() << ",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& e) {
    out << (first ? "" : ",\n") << e;
    first = false;
  };
  for (const auto& m : meta) emit(m);
  for (auto& [key, th] : threads) {
    std::stable_sort(th.events.begin(), th.events.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [ts, e] : th.events) emit(e);
  }
  out << "\n]}\n";
}

}  // namespace fullshard::sim
