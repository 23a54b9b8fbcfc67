#include "simulator/simulate.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "core/common/error.h"
#include "core/model/model_flops.h"
#include "core/fsdp/shard_layout.h"
#include "core/mesh/device_mesh.h"
#include "core/memory/timeline_downsample.h"
#include "core/train/training_program.h"
#include "simulator/checkpoint_play.h"
#include "simulator/cost/hardware_cost_model.h"
#include "simulator/extrapolate.h"
#include "simulator/host_memory.h"
#include "simulator/sim_limits.h"
#include "simulator/sim_backend.h"

namespace fullshard::sim {

// NOTE [Rank classes in linear time]: a rank's program depends on its shard group's size, its
// index in it and its micro-batch. Both come from the rank's mesh coordinates (the group along
// the shard dimension is ordered by that coordinate, as DeviceMesh::group builds it), so no
// group is built per rank (that was quadratic in the world size), and a parameter's local rows
// depend only on its first dimension, so the key holds each distinct first dimension once.
std::vector<std::vector<int>> rank_classes(const Scenario& s) {
  const int world = s.world_size();
  Transformer model(s.model, tensor_parallel_for(s, 0));  // local shapes are alike on every tp rank
  std::vector<int64_t> rows;
  model.root().for_each_param([&](Param& p) { rows.push_back(p.shape[0]); });
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  int shard = mesh.dim_index("shard");
  if (shard < 0) shard = mesh.ndim() - 1;  // as mesh_info_for
  const int w = mesh.shape()[static_cast<size_t>(shard)];
  int stride = 1;  // of the shard coordinate in the row-major rank
  for (int d = mesh.ndim() - 1; d > shard; --d) stride *= mesh.shape()[static_cast<size_t>(d)];
  std::map<std::vector<int64_t>, std::vector<int>> by_key;
  // Played checkpoint saves (NOTE [Playing a checkpoint save]): writers differ from the rest.
  const bool saves = s.training.checkpoint.every > 0;
  std::vector<int64_t> key(rows.size() + (saves ? 2 : 1));
  for (int r = 0; r < world; ++r) {
    const int idx = (r / stride) % w;
    for (size_t i = 0; i < rows.size(); ++i) key[i] = shard_rows(rows[i], w, idx);
    key[rows.size()] = s.training.batch_for(r);  // an uneven batch changes the program too
    if (saves) key.back() = writes_checkpoint(s, r) ? 1 : 0;
    by_key[key].push_back(r);
  }
  std::vector<std::vector<int>> classes;
  for (auto& [k, v] : by_key) classes.push_back(std::move(v));
  std::sort(classes.begin(), classes.end());
  return classes;
}

namespace {

PlaceholderCostOptions cost_options(const Scenario& s) {
  const HardwareProfile& hw = s.hardware.device;
  PlaceholderCostOptions o;
  bool low =
      s.fsdp.mixed_precision.param_dtype && *s.fsdp.mixed_precision.param_dtype != DType::kFloat32;
  double peak = low ? hw.peak_flops_bf16 : hw.peak_flops_fp32;
  if (peak > 0) o.peak_flops = peak;
  if (hw.hbm_bandwidth > 0) o.memory_bandwidth = hw.hbm_bandwidth;
  double link =
      s.world_size() <= s.hardware.gpus_per_node ? hw.nvlink_bandwidth : hw.network_bandwidth;
  if (link > 0) o.link_bandwidth = link;
  if (s.training.checkpoint.storage_write_bandwidth > 0)
    o.storage_write_bandwidth = s.training.checkpoint.storage_write_bandwidth;
  return o;
}

// NOTE: core/memory/timeline_downsample.h keeps each bucket's extremes (and so the peak).
std::vector<TimelinePoint> downsample(std::vector<TimelinePoint> pts, size_t max_points) {
  std::vector<uint64_t> alloc(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) alloc[i] = pts[i].allocated_bytes;
  std::vector<TimelinePoint> out;
  for (size_t i : downsample_indices(alloc, max_points)) out.push_back(pts[i]);
  return out;
}

struct Recorded {
  std::unique_ptr<SimBackend> backend;
  std::vector<uint64_t> allocated_after_step;
  std::vector<StepEndState> step_ends;  // NOTE [Steady state] in extrapolate.cc
  std::optional<OutOfMemoryInfo> oom;
};

// NOTE [Shared recording]: ranks of one class run the same host program (rank_classes); only
// their process groups differ (HSDP: each rank's shard and replicate groups). With every rank
// played, a rank after its class's first gets that program with every group mapped to the
// group of the same mesh dimension holding it, and without its allocations, frees and memory
// accesses: the engine's timing never reads them (host no-ops), and the memory results, the
// timeline and the stream / use-after-free checks would repeat the recorded rank's exactly.
// Collective matching and hangs are still checked across every rank. nullopt when a
// collective uses a group outside `from`'s mesh groups (then the rank is recorded).
std::optional<Program> program_for_rank(const Scenario& s, const Program& from_program, int from,
                                        int to, GroupRegistry& groups) {
  const MeshInfo a = mesh_info_for(s, from), b = mesh_info_for(s, to);
  std::unordered_map<uint32_t, uint32_t> map;
  map[groups.intern(a.shard_group)] = groups.intern(b.shard_group);
  if (a.replicate_group && b.replicate_group)
    map[groups.intern(*a.replicate_group)] = groups.intern(*b.replicate_group);
  if (a.tp_group && b.tp_group) map[groups.intern(*a.tp_group)] = groups.intern(*b.tp_group);
  if (a.shard_tp_group && b.shard_tp_group)
    map[groups.intern(*a.shard_tp_group)] = groups.intern(*b.shard_tp_group);
  Program p;
  p.rank = to;
  p.names = from_program.names;
  p.truncated = from_program.truncated;
  p.instrs.reserve(from_program.instrs.size());
  for (const Instr& in : from_program.instrs) {
    if (in.type == InstrType::kAlloc || in.type == InstrType::kFree) continue;
    Instr& out = p.instrs.emplace_back(in);
    out.access_begin = out.access_count = 0;
    if (in.type != InstrType::kCollective) continue;
    auto it = map.find(in.group);
    if (it == map.end()) return std::nullopt;
    out.group = it->second;
  }
  return p;
}

Recorded record_rank(const Scenario& s, int rank, GroupRegistry& groups, bool timeline,
                     int run_steps, bool play_checkpoint) {
  Recorded r;
  AllocatorOptions device = s.hardware.allocator;
  device.capacity_bytes -= std::min(device.capacity_bytes, symmetric_memory_bytes(s));
  r.backend = std::make_unique<SimBackend>(rank, s.world_size(), device, groups, timeline);
  SimBackend& b = *r.backend;
  std::unique_ptr<TrainingProgram> prog;
  try {
    prog = std::make_unique<TrainingProgram>(b, s);
    std::optional<CheckpointPlayer> saver;  // NOTE [Playing a checkpoint save]
    if (play_checkpoint && s.training.checkpoint.every > 0) saver.emplace(b, *prog, s, run_steps);
    for (int step = 0; step < s.training.steps; ++step) {
      prog->run_step(step);
      const MemoryTracker& m = b.memory();
      const MemorySnapshot now = m.current();
      r.allocated_after_step.push_back(now.allocated_bytes);
      r.step_ends.push_back({now.allocated_bytes, now.reserved_bytes, now.host_bytes,
                             m.at_peak_allocated().allocated_bytes,
                             m.at_peak_reserved().reserved_bytes,
                             m.allocator_stats().num_segments});
      if (saver) saver->after_step(step, step + 1 == s.training.steps);
    }
    if (saver) saver->finish();
  } catch (const OutOfMemoryError& e) {
    OutOfMemoryInfo o;
    o.requested_bytes = e.requested_bytes;
    o.what = e.what_for;
    o.category = std::string(category_key(e.category));
    o.capacity_bytes = e.capacity_bytes;
    o.at_failure = e.at_failure;
    o.step = b.step();
    r.oom = o;
  }
  b.truncate();  // teardown frees are not part of the run
  prog.reset();
  return r;
}

// One play of `s`, whose training.steps are the steps to play, for a run of `steps` steps
// (NOTE [Steady state] in extrapolate.cc). With `may_play_more`, a play whose last two steps
// are not steady returns nullopt (the caller plays more steps) before on_played is called.
std::optional<SimulationReport> play_steps(const Scenario& s, int steps, const SimulateOptions& opt,
                                           bool may_play_more) {
  SimulationReport rep;
  const int played = s.training.steps;
  rep.steps = steps;
  rep.simulated_steps = played;
  rep.scenario = s.name;
  rep.world_size = s.world_size();
  // A straggler (hardware.rank_speed) makes ranks differ: simulate every rank.
  bool uneven = false;
  for (const auto& [rank, speed] : s.hardware.rank_speed) uneven |= speed != 1.0;
  uneven |= s.training.uneven_batch();  // an uneven batch too
  const bool all_ranks = opt.all_ranks || uneven;
  rep.simulated_all_ranks = all_ranks;
  rep.symmetric_memory_bytes = symmetric_memory_bytes(s);
  rep.capacity_bytes = s.hardware.allocator.capacity_bytes -
                       std::min(s.hardware.allocator.capacity_bytes, rep.symmetric_memory_bytes);
  rep.parameters = parameter_count(s.model);

  // With --ranks all every rank is simulated, but memory timelines are kept only for the
  // first rank of each class of identical ranks (they are the same for the others).
  std::vector<std::vector<int>> classes = rank_classes(s);
  std::vector<bool> timeline_rank(static_cast<size_t>(rep.world_size), false);
  std::vector<int> class_first(static_cast<size_t>(rep.world_size),
                               -1);  // rank -> its class's first rank
  for (const auto& c : classes) {
    timeline_rank[static_cast<size_t>(c.front())] = true;
    for (int r : c) class_first[static_cast<size_t>(r)] = c.front();
  }
  if (all_ranks) {
    classes.clear();
    for (int r = 0; r < rep.world_size; ++r) classes.push_back({r});
  }
  GroupRegistry groups;
  std::vector<Recorded> recs;
  std::vector<size_t> rec_of;              // per played program: its recording in recs
  std::vector<uint64_t> rec_instructions;  // per recording: its program's instruction count
  std::vector<long> rec_of_rank(static_cast<size_t>(rep.world_size), -1);
  std::vector<Program> programs;
  for (const auto& cls : classes) {
    const int rank = cls.front();
    const int first = class_first[static_cast<size_t>(rank)];
    // NOTE [Shared recording] (above): with every rank played, a rank whose class's first rank was
    // already recorded gets a copy of that program with its own process groups, unless
    // record_every_rank asks for a recording of its own.
    std::optional<Program> copied;
    if (!opt.record_every_rank && !opt.mutate_program && first != rank &&
        rec_of_rank[static_cast<size_t>(first)] >= 0)
      copied = program_for_rank(
          s, programs[static_cast<size_t>(rec_of_rank[static_cast<size_t>(first)])], first, rank,
          groups);
    if (copied) {
      rec_of.push_back(rec_of[static_cast<size_t>(rec_of_rank[static_cast<size_t>(first)])]);
      programs.push_back(std::move(*copied));
    } else {
      recs.push_back(record_rank(s, rank, groups, timeline_rank[static_cast<size_t>(rank)], steps,
                                 opt.play_checkpoint));
      rec_of.push_back(recs.size() - 1);
      programs.push_back(std::move(recs.back().backend->program()));
      rec_instructions.push_back(programs.back().instrs.size());
      if (opt.mutate_program) opt.mutate_program(programs.back());
    }
    rec_of_rank[static_cast<size_t>(rank)] = static_cast<long>(programs.size() - 1);
    if (opt.progress) opt.progress(programs.size(), classes.size());
  }

  std::unique_ptr<CostModel> cost_model;
  if (opt.time_model == TimeModel::kPlaceholder) {
    cost_model = std::make_unique<PlaceholderCostModel>(cost_options(s));
    rep.time_model = "placeholder";
  } else {
    ComputeOptions co;
    co.pinned_memory = s.fsdp.pin_memory;
    co.host_threads_per_rank = s.hardware.host_threads_per_rank;
    if (s.training.checkpoint.storage_write_bandwidth > 0)
      co.storage_write_bandwidth = s.training.checkpoint.storage_write_bandwidth;
    cost_model = std::make_unique<HardwareCostModel>(
        s.hardware.device, ClusterLayout{s.hardware.nodes, s.hardware.gpus_per_node}, co);
    rep.time_model = "nccl+roofline";
  }
  const CostModel& cost = *cost_model;
  EngineOptions eo;
  eo.symmetric = !all_ranks;
  if (uneven) {
    for (const auto& cls : classes) {
      auto it = s.hardware.rank_speed.find(cls.front());
      eo.speed.push_back(it == s.hardware.rank_speed.end() ? 1.0 : it->second);
    }
  }
  eo.checks = opt.checks;
  // NOTE [Free rule]: FSDP2 frees cross-stream buffers (the reduce-scatter output after the
  // optimizer, the HSDP all-reduce input at finalize) before their pool's stream has waited
  // on the last use; it is safe because every later allocation from that pool happens after
  // such a wait. So a hazard is reported when freed memory is reused unordered, not at free.
  eo.check.free_rule = FreeRule::kAtReuse;
  EngineResult er = simulate(programs, groups.groups(), cost, eo);
  rep.problems = er.problems;
  rep.events_processed = er.events_processed;

  const int last_step = s.training.steps - 1;
  bool incomplete = false;
  std::vector<PlayedCheckpointSave> played_saves;  // NOTE [Playing a checkpoint save]
  double played_final_wait = 0, played_exposed = -1;
  for (size_t ci = 0; ci < classes.size(); ++ci) {
    const Program& prog = programs[ci];
    const RankTiming& rt = er.ranks[ci];
    const Recorded& rec = recs[rec_of[ci]];
    const MemoryTracker& mem = rec.backend->memory();
    RankClassReport c;
    c.ranks = classes[ci];
    c.representative = classes[ci].front();
    c.peak_allocated_bytes = mem.at_peak_allocated().allocated_bytes;
    c.peak_reserved_bytes = mem.at_peak_reserved().reserved_bytes;
    c.peak_host_bytes = mem.peak_host_bytes();
    c.breakdown_at_peak = mem.at_peak_allocated().by_category;
    c.allocated_after_step = rec.allocated_after_step;
    c.end_allocated_bytes = c.allocated_after_step.empty() ? 0 : c.allocated_after_step.back();
    c.allocator = mem.allocator_stats();
    c.instructions = rec_instructions[rec_of[ci]];
    c.end_time_s = rt.end_s;
    c.oom = rec.oom;
    if (c.oom) rep.out_of_memory = true;
    for (int k = 0; k < kNumStreams; ++k) c.busy_s[k] = rt.busy_s[k];
    // NOTE [Timeline time]: the host runs ahead of the device, so allocations happen (in host
    // order, as the caching allocator sees them) long before the device runs the work they
    // serve. A memory event is placed at the time the device starts the next kernel or
    // collective the host issued after it (or the rank's end), made non-decreasing.
    std::vector<double> dev_time(prog.instrs.size(), rt.end_s);
    double next = rt.end_s;
    for (size_t i = prog.instrs.size(); i-- > 0;) {
      const Instr& in = prog.instrs[i];
      dev_time[i] = next;
      if ((in.type == InstrType::kKernel || in.type == InstrType::kCollective) &&
          rt.times[i].start >= 0)
        next = std::min(next, rt.times[i].start);
      // A played checkpoint save starts right after the step's end synchronize, when the
      // device is done with the step: what the host did before it happened by then, not after
      // the save's waits (NOTE [Playing a checkpoint save]).
      if (in.type == InstrType::kMarker && rt.times[i].start >= 0 &&
          instr_name(prog, in) == "checkpoint save")
        next = std::min(next, rt.times[i].start);
    }
    // Each memory event's time and labels (NOTE [Timeline labels] in rank_report.h): the buffer's
    // name, and the next kernel or collective the host issued (found walking backwards).
    struct Placed {
      double time;
      int32_t what, op;
    };
    std::vector<int32_t> next_op(prog.instrs.size(), -1);
    for (size_t i = prog.instrs.size(), op = SIZE_MAX; i-- > 0;) {
      if (op != SIZE_MAX) next_op[i] = static_cast<int32_t>(prog.instrs[op].name);
      InstrType t = prog.instrs[i].type;
      if (t == InstrType::kKernel || t == InstrType::kCollective) op = i;
    }
    std::unordered_map<uint64_t, Placed> time_of;
    std::unordered_map<uint64_t, int32_t> buffer_name;
    if (timeline_rank[static_cast<size_t>(c.representative)]) time_of.reserve(prog.instrs.size());
    std::vector<double> step_end;
    std::vector<long> step_marker;
    // A step begins at the previous step's end, or after the checkpoint save between them
    // (NOTE [Playing a checkpoint save]): step durations are those of training alone.
    std::vector<double> step_begin;
    std::vector<long> step_begin_marker;
    double begin_at = 0, save_at = 0, final_wait = 0, write_begin = 0, write_end = 0;
    long begin_marker_at = -1;
    std::vector<PlayedCheckpointSave> saves;
    double running = 0;
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const Instr& in = prog.instrs[i];
      running = std::max(running, dev_time[i]);
      if (in.type == InstrType::kAlloc) buffer_name[in.buffer] = static_cast<int32_t>(in.name);
      if (in.type == InstrType::kAlloc || in.type == InstrType::kFree) {
        auto nm = buffer_name.find(in.buffer);
        time_of[in.host_seq] =
            Placed{running, nm == buffer_name.end() ? -1 : nm->second, next_op[i]};
      }
      if (in.type == InstrType::kMarker && instr_name(prog, in) == "step end") {
        step_end.push_back(rt.times[i].start);
        step_marker.push_back(static_cast<long>(i));
        step_begin.push_back(begin_at);
        step_begin_marker.push_back(begin_marker_at);
        begin_at = rt.times[i].start;
        begin_marker_at = static_cast<long>(i);
      }
      if (in.type == InstrType::kStorageWrite) {
        write_begin = rt.times[i].start;
        write_end = rt.times[i].end;
      }
      if (in.type == InstrType::kMarker && rt.times[i].start >= 0) {
        const std::string_view label = instr_name(prog, in);
        if (label == "checkpoint save") save_at = rt.times[i].start;
        if (label == "checkpoint end")
          saves.push_back({in.step, save_at, rt.times[i].start, write_begin, write_end});
        if (label == "checkpoint collected") final_wait = rt.times[i].start - begin_at;
        if (label == "checkpoint end" || label == "checkpoint collected") {
          begin_at = rt.times[i].start;
          begin_marker_at = static_cast<long>(i);
        }
      }
      if (in.type == InstrType::kCollective && in.step == last_step)
        ++c.collectives_per_step[static_cast<int>(in.coll)];
    }
    std::vector<TimelinePoint> pts;
    // Only the first rank of each class has a timeline (a copied rank shares its recording).
    static const std::vector<MemoryEvent> kNoEvents;
    const auto& events =
        timeline_rank[static_cast<size_t>(c.representative)] ? mem.timeline() : kNoEvents;
    pts.reserve(events.size());
    for (const MemoryEvent& e : events) {
      auto it = time_of.find(e.host_seq);
      if (it == time_of.end()) continue;  // after the recorded run (teardown)
      TimelinePoint p;
      p.time_s = it->second.time;
      p.what = it->second.what;
      p.op = it->second.op;
      p.is_alloc = e.is_alloc;
      p.allocated_bytes = e.allocated_bytes;
      p.reserved_bytes = e.reserved_bytes;
      p.host_bytes = e.host_bytes;
      p.by_category = e.by_category;
      if (e.host_seq == mem.at_peak_allocated().host_seq) c.peak_time_s = p.time_s;
      pts.push_back(p);
    }
    c.timeline = downsample(std::move(pts), opt.max_timeline_points);
    if (!c.timeline.empty()) c.timeline_names = prog.names;
    // What runs on each stream at the peak (for the plots' peak annotation).
    for (size_t i = 0; i < prog.instrs.size() && !c.timeline.empty(); ++i) {
      const Instr& in = prog.instrs[i];
      const InstrTime& t = rt.times[i];
      if ((in.type == InstrType::kKernel || in.type == InstrType::kCollective) && t.start >= 0 &&
          t.start <= c.peak_time_s && c.peak_time_s < t.end)
        c.in_flight_at_peak.push_back({std::string(stream_name(in.stream)),
                                       std::string(instr_name(prog, in)), t.start, t.end});
    }
    c.compute_s = rt.compute_s;
    c.exposed_comm_s = rt.exposed_comm_s;
    c.comm_s = rt.comm_s;
    // The last step's duration and its compute / exposed communication; with steps left to
    // extrapolate, the whole-run figures grow by that step's for each (NOTE [Steady state]).
    const bool played_all = rt.completed && !rec.oom && static_cast<int>(step_end.size()) == played;
    if (!played_all) incomplete = true;
    if (!step_end.empty() && rt.completed) {
      const size_t n = step_end.size();
      double end = step_end.back();
      double begin = step_begin.back();
      c.last_step_s = end - begin;
      const long begin_marker = step_begin_marker.back();
      const StepBreakdown last =
          step_breakdown(prog, rt, begin_marker, step_marker.back(), cost.launch_overhead_seconds(),
                         &groups.groups(), &cost);
      if (rep.last_step_rank < 0 || end - begin > rep.step_time_s) {
        rep.last_step = last;
        rep.last_step_rank = c.representative;
      }
      rep.step_time_s = std::max(rep.step_time_s, end - begin);
      if (played_all && played < steps) {
        // Steady when the last two played steps agree (a single played step cannot be).
        const bool steady =
            n >= 2 && is_steady(step_end[n - 2] - step_begin[n - 2], rec.step_ends[n - 2],
                                end - begin, rec.step_ends[n - 1]);
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
    double exposed = final_wait;
    for (const auto& sv : saves) exposed += sv.exposed_s();
    if (!saves.empty() && exposed > played_exposed) {  // the slowest writer's saves
      played_exposed = exposed;
      played_saves = std::move(saves);
      played_final_wait = final_wait;
    }
    rep.classes.push_back(std::move(c));
  }
  // A rank that ran out of memory or hung stops there: playing more steps changes nothing.
  if (incomplete) rep.steady_state = false;
  if (played < steps && !rep.steady_state && may_play_more && !incomplete) return std::nullopt;
  rep.extrapolated_steps = steps - played;
  // Whole-run compute / exposed figures are per step on average.
  if (steps > 0) {
    rep.compute_s /= steps;
    rep.exposed_comm_s /= steps;
    rep.comm_s /= steps;
  }
  const auto& m = s.model;
  // Tokens per GPU per step: the mean over ranks when the batch is uneven.
  double batch = 0;
  for (int r = 0; r < s.world_size(); ++r) batch += static_cast<double>(s.training.batch_for(r));
  batch /= std::max(1, s.world_size());
  // A tp group trains on one batch: each of its GPUs accounts for 1/tp of its tokens.
  const int tp = s.fsdp.mesh_size("tp");
  const double tokens = batch * s.training.seq_len * s.training.grad_accum_steps / tp;
  rep.model_flops_per_token = model_flops_per_token(m, s.training.seq_len);  // torchtitan's count
  rep.tokens_per_step = tokens * s.world_size();
  rep.total_tokens = rep.tokens_per_step * steps;
  if (rep.step_time_s > 0) {
    rep.tokens_per_s_per_gpu = tokens / rep.step_time_s;
    const HardwareProfile& hw = s.hardware.device;
    bool low = s.fsdp.mixed_precision.param_dtype &&
               *s.fsdp.mixed_precision.param_dtype != DType::kFloat32;
    double peak = low ? hw.peak_flops_bf16 : hw.peak_flops_fp32;
    if (peak > 0) rep.mfu = rep.model_flops_per_token * rep.tokens_per_s_per_gpu / peak;
  }
  {  // NOTE [Host memory per node]
    const HostMemoryPerNode h = host_memory_per_node(rep.classes, s.hardware.gpus_per_node);
    rep.host_memory_bytes = s.hardware.device.host_memory_bytes;
    rep.peak_host_bytes_per_node = h.peak_bytes;
    rep.peak_host_node = h.node;
    rep.host_out_of_memory = rep.host_memory_bytes > 0 && h.peak_bytes > rep.host_memory_bytes;
  }
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
  if (opt.on_played) opt.on_played(PlayedRun{programs, groups.groups(), er, cost, rep});
  return rep;
}

}  // namespace

SimulationReport simulate_scenario(const Scenario& s, const SimulateOptions& opt) {
  const int steps = s.training.steps;
  const bool every_step = opt.simulated_steps <= 0 || opt.simulated_steps >= steps;
  int played = every_step ? steps : opt.simulated_steps;
  check_simulation_limits(s, played, opt.all_ranks);
  for (;;) {
    Scenario p = s;
    p.training.steps = played;
    // More steps only within the limits (else the run is extrapolated, marked not steady).
    int more = every_step ? 0 : next_simulated_steps(played, steps);
    if (more > 0 && !within_simulation_limits(s, more, opt.all_ranks)) more = 0;
    std::optional<SimulationReport> r = play_steps(p, steps, opt, more > 0);
    if (r) return std::move(*r);
    played = more;
  }
}

}  // namespace fullshard::sim
