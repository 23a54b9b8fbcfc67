#include "simulator/play_assemble.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/memory/timeline_downsample.h"
#include "core/model/model_flops.h"
#include "simulator/host_memory.h"

namespace fullshard::sim {

namespace {

// NOTE: core/memory/timeline_downsample.h keeps each bucket's extremes (and so the peak).
std::vector<TimelinePoint> downsample(std::vector<TimelinePoint> pts, size_t max_points) {
  std::vector<uint64_t> alloc(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) alloc[i] = pts[i].allocated_bytes;
  std::vector<TimelinePoint> out;
  const std::vector<size_t> keep = downsample_indices(alloc, max_points);
  out.reserve(keep.size());
  for (size_t i : keep) out.push_back(pts[i]);
  return out;
}

bool is_device_work(InstrType t) { return t == InstrType::kKernel || t == InstrType::kCollective; }

// NOTE [Timeline time]: the host runs ahead of the device, so allocations happen (in host
// order, as the caching allocator sees them) long before the device runs the work they
// serve. A memory event is placed at the time the device starts the next kernel or
// collective the host issued after it (or the rank's end), made non-decreasing.
std::vector<double> device_times(const Program& prog, const RankTiming& rt) {
  std::vector<double> dev_time(prog.instrs.size(), rt.end_s);
  double next = rt.end_s;
  for (size_t i = prog.instrs.size(); i-- > 0;) {
    const Instr& in = prog.instrs[i];
    dev_time[i] = next;
    if (is_device_work(in.type) && rt.times[i].start >= 0) next = std::min(next, rt.times[i].start);
    // A played checkpoint save starts right after the step's end synchronize, when the
    // device is done with the step: what the host did before it happened by then, not after
    // the save's waits (NOTE [Playing a checkpoint save]).
    if (in.type == InstrType::kMarker && rt.times[i].start >= 0 &&
        instr_name(prog, in) == "checkpoint save")
      next = std::min(next, rt.times[i].start);
  }
  return dev_time;
}

// A memory event's time and labels (NOTE [Timeline labels] in core/report/rank_report.h): the
// buffer's name, and the next kernel or collective the host issued.
struct Placed {
  uint64_t host_seq;
  double time;
  int32_t what, op;
};

// One Placed per allocation and free, in host order (sorted by host_seq).
std::vector<Placed> place_memory_instrs(const Program& prog, const std::vector<double>& dev_time) {
  std::vector<int32_t> next_op(prog.instrs.size(), -1);  // found walking backwards
  for (size_t i = prog.instrs.size(), op = SIZE_MAX; i-- > 0;) {
    if (op != SIZE_MAX) next_op[i] = static_cast<int32_t>(prog.instrs[op].name);
    if (is_device_work(prog.instrs[i].type)) op = i;
  }
  std::vector<Placed> placed;
  // Each buffer's name by buffer id (a recording numbers its buffers from 1 up; -1: none).
  uint64_t max_id = 0;
  for (const Instr& in : prog.instrs)
    if (in.type == InstrType::kAlloc || in.type == InstrType::kFree)
      max_id = std::max(max_id, in.buffer);
  std::vector<int32_t> buffer_name(max_id + 1, -1);
  double running = 0;
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const Instr& in = prog.instrs[i];
    running = std::max(running, dev_time[i]);
    if (in.type == InstrType::kAlloc) buffer_name[in.buffer] = static_cast<int32_t>(in.name);
    if (in.type == InstrType::kAlloc || in.type == InstrType::kFree)
      placed.push_back({in.host_seq, running, buffer_name[in.buffer], next_op[i]});
  }
  // Host order is host_seq order; stable, so of equal host_seqs the last placed is found.
  if (!std::is_sorted(placed.begin(), placed.end(),
                      [](const Placed& a, const Placed& b) { return a.host_seq < b.host_seq; }))
    std::stable_sort(placed.begin(), placed.end(),
                     [](const Placed& a, const Placed& b) { return a.host_seq < b.host_seq; });
  return placed;
}

// The last Placed of `host_seq`, or nullptr (an event after the recorded run: teardown).
const Placed* find_placed(const std::vector<Placed>& placed, uint64_t host_seq) {
  auto it = std::upper_bound(placed.begin(), placed.end(), host_seq,
                             [](uint64_t s, const Placed& p) { return s < p.host_seq; });
  if (it == placed.begin() || std::prev(it)->host_seq != host_seq) return nullptr;
  return &*std::prev(it);
}

// The class's memory timeline (its first rank's), its peak time and what runs at the peak.
void memory_timeline(RankClassReport& c, const Program& prog, const RankTiming& rt,
                     const MemoryTracker& mem, const std::vector<double>& dev_time,
                     size_t max_points) {
  const std::vector<Placed> placed = place_memory_instrs(prog, dev_time);
  const std::vector<MemoryEvent>& events = mem.timeline();
  const uint64_t peak_seq = mem.at_peak_allocated().host_seq;
  std::vector<TimelinePoint> pts;
  pts.reserve(events.size());
  // Events come in host order: the last Placed of each host_seq is found walking forward
  // (find_placed's answer, without a search per event); out of order, it searches.
  size_t cursor = 0;
  uint64_t last_seq = 0;
  RoutedTokenBytes routed;  // NOTE [Routed tokens in the timeline] in core/report/rank_report.h
  uint64_t routed_now = 0;
  CategoryBytes before{};
  for (const MemoryEvent& e : events) {
    const CategoryBytes prev = std::exchange(before, e.by_category);
    const Placed* at = nullptr;
    if (e.host_seq >= last_seq) {
      while (cursor < placed.size() && placed[cursor].host_seq <= e.host_seq) ++cursor;
      if (cursor > 0 && placed[cursor - 1].host_seq == e.host_seq) at = &placed[cursor - 1];
      last_seq = e.host_seq;
    } else {
      at = find_placed(placed, e.host_seq);
    }
    if (!at) continue;  // after the recorded run (teardown)
    routed_now = routed.after(e, prev, prog.names[at->what]);
    TimelinePoint p;
    p.time_s = at->time;
    p.what = at->what;
    p.op = at->op;
    p.is_alloc = e.is_alloc;
    p.allocated_bytes = e.allocated_bytes;
    p.reserved_bytes = e.reserved_bytes;
    p.host_bytes = e.host_bytes;
    p.by_category = e.by_category;
    p.routed_bytes = routed_now;
    if (e.host_seq == peak_seq) c.peak_time_s = p.time_s;
    pts.push_back(p);
  }
  c.timeline = downsample(std::move(pts), max_points);
  if (c.timeline.empty()) return;
  c.timeline_names = prog.names;
  // What runs on each stream at the peak (for the plots' peak annotation).
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const Instr& in = prog.instrs[i];
    const InstrTime& t = rt.times[i];
    if (is_device_work(in.type) && t.start >= 0 && t.start <= c.peak_time_s &&
        c.peak_time_s < t.end)
      c.in_flight_at_peak.push_back(
          {std::string(stream_name(in.stream)), std::string(instr_name(prog, in)), t.start, t.end});
  }
  // Expert parallelism's all-to-alls, for the timeline's all-to-all lane (docs/plots.md).
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const Instr& in = prog.instrs[i];
    const InstrTime& t = rt.times[i];
    if (in.type == InstrType::kCollective && in.coll == CollectiveKind::kAllToAll && t.start >= 0)
      c.all_to_all_spans.push_back(
          {std::string(stream_name(in.stream)), std::string(instr_name(prog, in)), t.start, t.end});
  }
  std::stable_sort(c.all_to_all_spans.begin(), c.all_to_all_spans.end(),
                   [](const InFlightOp& a, const InFlightOp& b) { return a.start_s < b.start_s; });
}

// Where the played steps and checkpoint saves begin and end. A step begins at the previous
// step's end, or after the checkpoint save between them (NOTE [Playing a checkpoint save]):
// step durations are those of training alone.
struct StepMarks {
  std::vector<double> end, begin;
  std::vector<long> end_marker, begin_marker;
  std::vector<PlayedCheckpointSave> saves;
  double final_wait = 0;
};

StepMarks mark_steps(const Program& prog, const RankTiming& rt) {
  StepMarks m;
  double begin_at = 0, save_at = 0, write_begin = 0, write_end = 0;
  long begin_marker_at = -1;
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const Instr& in = prog.instrs[i];
    if (in.type == InstrType::kStorageWrite) {
      write_begin = rt.times[i].start;
      write_end = rt.times[i].end;
    }
    if (in.type != InstrType::kMarker) continue;
    const std::string_view label = instr_name(prog, in);
    if (label == "step end") {
      m.end.push_back(rt.times[i].start);
      m.end_marker.push_back(static_cast<long>(i));
      m.begin.push_back(begin_at);
      m.begin_marker.push_back(begin_marker_at);
      begin_at = rt.times[i].start;
      begin_marker_at = static_cast<long>(i);
    }
    if (rt.times[i].start < 0) continue;
    if (label == "checkpoint save") save_at = rt.times[i].start;
    if (label == "checkpoint end")
      m.saves.push_back({in.step, save_at, rt.times[i].start, write_begin, write_end});
    if (label == "checkpoint collected") m.final_wait = rt.times[i].start - begin_at;
    if (label == "checkpoint end" || label == "checkpoint collected") {
      begin_at = rt.times[i].start;
      begin_marker_at = static_cast<long>(i);
    }
  }
  return m;
}

// The class's memory figures, from its recording.
void memory_figures(RankClassReport& c, const Recorded& rec) {
  const MemoryTracker& mem = rec.backend->memory();
  c.peak_allocated_bytes = mem.at_peak_allocated().allocated_bytes;
  c.peak_reserved_bytes = mem.at_peak_reserved().reserved_bytes;
  c.peak_host_bytes = mem.peak_host_bytes();
  c.breakdown_at_peak = mem.at_peak_allocated().by_category;
  if (rec.backend->tracks_moe_memory()) c.moe_at_peak = rec.backend->moe_at_peak();
  c.allocated_after_step = rec.allocated_after_step;
  c.init_peak_allocated_bytes = rec.init_peak_allocated_bytes;
  c.init_peak_reserved_bytes = rec.init_peak_reserved_bytes;
  c.end_allocated_bytes = c.allocated_after_step.empty() ? 0 : c.allocated_after_step.back();
  c.allocator = mem.allocator_stats();
  c.oom = rec.oom;
}

// Tokens, MFU, host memory per node and the checkpoint's cost: the run's figures.
void run_figures(SimulationReport& rep, const Scenario& s, int steps) {
  const auto& m = s.model;
  // Tokens per GPU per step: the mean over ranks when the batch is uneven.
  double batch = 0;
  for (int r = 0; r < s.world_size(); ++r) batch += static_cast<double>(s.training.batch_for(r));
  batch /= std::max(1, s.world_size());
  // A tp group trains on one batch: each of its GPUs accounts for 1/tp of its tokens; so does a
  // pipeline's pp group (its stages run one batch) and a cp group (each holds 1/cp of the tokens).
  const int tp = s.fsdp.mesh_size("tp") * s.fsdp.mesh_size("pp") * s.fsdp.mesh_size("cp");
  const double tokens = batch * s.training.seq_len * s.training.grad_accum_steps / tp;
  rep.model_flops_per_token = model_flops_per_token(m, s.training.seq_len);  // torchtitan's count
  rep.tokens_per_step = tokens * s.world_size();
  rep.total_tokens = rep.tokens_per_step * steps;
  if (rep.step_time_s > 0) {
    rep.tokens_per_s_per_gpu = tokens / rep.step_time_s;
    const HardwareProfile& hw = s.hardware.device;
    const bool low =
        s.fsdp.mixed_precision.param_dtype.value_or(s.training.orig_dtype) != DType::kFloat32;
    double peak = low ? hw.peak_flops_bf16 : hw.peak_flops_fp32;
    if (peak > 0) rep.mfu = rep.model_flops_per_token * rep.tokens_per_s_per_gpu / peak;
  }
  // NOTE [Host memory per node] (simulator/host_memory.h)
  const HostMemoryPerNode h = host_memory_per_node(rep.classes, s.hardware.gpus_per_node);
  rep.host_memory_bytes = s.hardware.device.host_memory_bytes;
  rep.peak_host_bytes_per_node = h.peak_bytes;
  rep.peak_host_node = h.node;
  rep.host_out_of_memory = rep.host_memory_bytes > 0 && h.peak_bytes > rep.host_memory_bytes;
}

}  // namespace

std::optional<SimulationReport> assemble_report(SimulationReport rep, const Scenario& s,
                                                const RecordedPrograms& rec, const EngineResult& er,
                                                const CostModel& cost,
                                                const std::vector<GroupInfo>& groups,
                                                const AssembleOptions& opt) {
  const int steps = opt.steps;
  const int played = s.training.steps;
  const int last_step = played - 1;
  bool incomplete = false;
  std::vector<PlayedCheckpointSave> played_saves;  // NOTE [Playing a checkpoint save]
  double played_final_wait = 0, played_exposed = -1;
  rep.classes.reserve(rec.classes.size());
  for (size_t ci = 0; ci < rec.classes.size(); ++ci) {
    const Program& prog = rec.programs[ci];
    const RankTiming& rt = er.ranks[ci];
    const Recorded& recorded = rec.recs[rec.rec_of[ci]];
    RankClassReport c;
    c.ranks = rec.classes[ci];
    c.representative = rec.classes[ci].front();
    memory_figures(c, recorded);
    c.instructions = rec.rec_instructions[rec.rec_of[ci]];
    c.end_time_s = rt.end_s;
    if (c.oom) rep.out_of_memory = true;
    for (int k = 0; k < kNumStreams; ++k) c.busy_s[k] = rt.busy_s[k];
    for (const Instr& in : prog.instrs)
      if (in.type == InstrType::kCollective && in.step == last_step)
        ++c.collectives_per_step[static_cast<int>(in.coll)];
    // Only the first rank of each class has a timeline (a copied rank shares its recording).
    if (rec.timeline_rank[static_cast<size_t>(c.representative)])
      memory_timeline(c, prog, rt, recorded.backend->memory(), device_times(prog, rt),
                      opt.max_timeline_points);
    StepMarks marks = mark_steps(prog, rt);
    c.compute_s = rt.compute_s;
    c.exposed_comm_s = rt.exposed_comm_s;
    c.comm_s = rt.comm_s;
    // The last step's duration and its compute / exposed communication; with steps left to
    // extrapolate, the whole-run figures grow by that step's for each (NOTE [Steady state]).
    const bool played_all =
        rt.completed && !recorded.oom && static_cast<int>(marks.end.size()) == played;
    if (!played_all) incomplete = true;
    if (!marks.end.empty() && rt.completed) {
      const size_t n = marks.end.size();
      const double end = marks.end.back();
      const double begin = marks.begin.back();
      c.last_step_s = end - begin;
      const StepBreakdown last =
          step_breakdown(prog, rt, marks.begin_marker.back(), marks.end_marker.back(),
                         cost.launch_overhead_seconds(), &groups, &cost);
      if (rep.last_step_rank < 0 || end - begin > rep.step_time_s) {
        rep.last_step = last;
        rep.last_step_rank = c.representative;
      }
      rep.step_time_s = std::max(rep.step_time_s, end - begin);
      if (played_all && played < steps) {
        // Steady when the last two played steps agree (a single played step cannot be).
        const bool steady =
            n >= 2 && is_steady(marks.end[n - 2] - marks.begin[n - 2], recorded.step_ends[n - 2],
                                end - begin, recorded.step_ends[n - 1]);
        if (!steady) rep.steady_state = false;
        c.compute_s = extrapolate_total(c.compute_s, last.compute_s, played, steps);
        c.comm_s = extrapolate_total(c.comm_s, last.comm_s, played, steps);
        c.exposed_comm_s = extrapolate_total(c.exposed_comm_s, last.exposed_comm_s, played, steps);
        for (int k = 0; k < kNumStreams; ++k)
          c.busy_s[k] = extrapolate_total(c.busy_s[k], last.stream_busy_s[static_cast<size_t>(k)],
                                          played, steps);
        c.end_time_s = extrapolate_total(c.end_time_s, c.last_step_s, played, steps);
      }
    }
    rep.compute_s = std::max(rep.compute_s, c.compute_s);
    rep.exposed_comm_s = std::max(rep.exposed_comm_s, c.exposed_comm_s);
    rep.comm_s = std::max(rep.comm_s, c.comm_s);
    rep.total_time_s = std::max(rep.total_time_s, c.end_time_s);
    double exposed = marks.final_wait;
    for (const auto& sv : marks.saves) exposed += sv.exposed_s();
    if (!marks.saves.empty() && exposed > played_exposed) {  // the slowest writer's saves
      played_exposed = exposed;
      played_saves = std::move(marks.saves);
      played_final_wait = marks.final_wait;
    }
    rep.classes.push_back(std::move(c));
  }
  // A rank that ran out of memory or hung stops there: playing more steps changes nothing.
  if (incomplete) rep.steady_state = false;
  if (played < steps && !rep.steady_state && opt.may_play_more && !incomplete) return std::nullopt;
  rep.extrapolated_steps = steps - played;
  // Whole-run compute / exposed figures are per step on average.
  if (steps > 0) {
    rep.compute_s /= steps;
    rep.exposed_comm_s /= steps;
    rep.comm_s /= steps;
  }
  run_figures(rep, s, steps);
  rep.pipeline = pipeline_report(s, rep.classes);
  if (s.training.checkpoint.every > 0 && !rep.out_of_memory &&
      rep.step_time_s > 0) {  // NOTE [Checkpoint cost]
    rep.checkpoint = checkpoint_cost(s, rep.step_time_s);
    rep.checkpoint->saves =
        steps / s.training.checkpoint.every;  // of the whole run, not the steps played
    rep.checkpoint->played = std::move(played_saves);
    rep.checkpoint->played_final_wait_s = played_final_wait;
    // The run's saves that were not played (steps extrapolated) cost what the closed form says.
    const int unplayed = rep.checkpoint->saves - static_cast<int>(rep.checkpoint->played.size());
    if (opt.play_checkpoint && unplayed > 0)
      rep.total_time_s += unplayed * rep.checkpoint->exposed_s;
  }
  return rep;
}

}  // namespace fullshard::sim
