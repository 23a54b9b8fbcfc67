#include "simulator/simulate.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "core/common/error.h"
#include "core/model/model_flops.h"
#include "core/fsdp/shard_layout.h"
#include "core/memory/timeline_downsample.h"
#include "core/scenario/training_program.h"
#include "simulator/cost/hardware_cost_model.h"
#include "simulator/sim_backend.h"

namespace fullshard::sim {

std::vector<std::vector<int>> rank_classes(const Scenario& s) {
  const int world = s.world_size();
  Transformer model(s.model);
  std::vector<Shape> shapes;
  model.root().for_each_param([&](Param& p) { shapes.push_back(p.shape); });
  std::map<std::vector<int64_t>, std::vector<int>> by_key;
  for (int r = 0; r < world; ++r) {
    MeshInfo mi = mesh_info_for(s, r);
    const int w = mi.shard_group.size();
    const int idx = mi.shard_group.index_of(r);
    std::vector<int64_t> key;
    key.reserve(shapes.size());
    for (const Shape& sh : shapes) key.push_back(shard_rows(sh[0], w, idx));
    key.push_back(s.training.batch_for(r));  // an uneven batch changes the program too
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
  bool low = s.fsdp.mixed_precision.param_dtype && *s.fsdp.mixed_precision.param_dtype != DType::kFloat32;
  double peak = low ? hw.peak_flops_bf16 : hw.peak_flops_fp32;
  if (peak > 0) o.peak_flops = peak;
  if (hw.hbm_bandwidth > 0) o.memory_bandwidth = hw.hbm_bandwidth;
  double link = s.world_size() <= s.hardware.gpus_per_node ? hw.nvlink_bandwidth : hw.network_bandwidth;
  if (link > 0) o.link_bandwidth = link;
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
std::optional<Program> program_for_rank(const Scenario& s, const Program& from_program, int from, int to,
                                        GroupRegistry& groups) {
  const MeshInfo a = mesh_info_for(s, from), b = mesh_info_for(s, to);
  std::unordered_map<uint32_t, uint32_t> map;
  map[groups.intern(a.shard_group)] = groups.intern(b.shard_group);
  if (a.replicate_group && b.replicate_group) map[groups.intern(*a.replicate_group)] = groups.intern(*b.replicate_group);
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

Recorded record_rank(const Scenario& s, int rank, GroupRegistry& groups, bool timeline) {
  Recorded r;
  r.backend = std::make_unique<SimBackend>(rank, s.world_size(), s.hardware.allocator, groups, timeline);
  SimBackend& b = *r.backend;
  std::unique_ptr<TrainingProgram> prog;
  try {
    prog = std::make_unique<TrainingProgram>(b, s);
    for (int step = 0; step < s.training.steps; ++step) {
      prog->run_step(step);
      r.allocated_after_step.push_back(b.memory().current().allocated_bytes);
    }
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

}  // namespace

SimulationReport simulate_scenario(const Scenario& s, const SimulateOptions& opt) {
  SimulationReport rep;
  rep.scenario = s.name;
  rep.world_size = s.world_size();
  // A straggler (hardware.rank_speed) makes ranks differ: simulate every rank.
  bool uneven = false;
  for (const auto& [rank, speed] : s.hardware.rank_speed) uneven |= speed != 1.0;
  uneven |= s.training.uneven_batch();  // an uneven batch too
  const bool all_ranks = opt.all_ranks || uneven;
  rep.simulated_all_ranks = all_ranks;
  rep.capacity_bytes = s.hardware.allocator.capacity_bytes;
  rep.parameters = parameter_count(s.model);

  // With --ranks all every rank is simulated, but memory timelines are kept only for the
  // first rank of each class of identical ranks (they are the same for the others).
  std::vector<std::vector<int>> classes = rank_classes(s);
  std::vector<bool> timeline_rank(static_cast<size_t>(rep.world_size), false);
  std::vector<int> class_first(static_cast<size_t>(rep.world_size), -1);  // rank -> its class's first rank
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
  std::vector<size_t> rec_of;             // per played program: its recording in recs
  std::vector<uint64_t> rec_instructions;  // per recording: its program's instruction count
  std::vector<long> rec_of_rank(static_cast<size_t>(rep.world_size), -1);
  std::vector<Program> programs;
  for (const auto& cls : classes) {
    const int rank = cls.front();
    const int first = class_first[static_cast<size_t>(rank)];
    // NOTE [Shared recording]: with every rank played, a rank whose class's first rank was
    // already recorded gets a copy of that program with its own process groups, unless
    // record_every_rank asks for a recording of its own.
    std::optional<Program> copied;
    if (!opt.record_every_rank && !opt.mutate_program && first != rank && rec_of_rank[static_cast<size_t>(first)] >= 0)
      copied = program_for_rank(s, programs[static_cast<size_t>(rec_of_rank[static_cast<size_t>(first)])], first, rank, groups);
    if (copied) {
      rec_of.push_back(rec_of[static_cast<size_t>(rec_of_rank[static_cast<size_t>(first)])]);
      programs.push_back(std::move(*copied));
    } else {
      recs.push_back(record_rank(s, rank, groups, timeline_rank[static_cast<size_t>(rank)]));
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
      if ((in.type == InstrType::kKernel || in.type == InstrType::kCollective) && rt.times[i].start >= 0)
        next = std::min(next, rt.times[i].start);
    }
    // Each memory event's time and labels (NOTE [Timeline labels] in simulate.h): the buffer's
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
    double running = 0;
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
      const Instr& in = prog.instrs[i];
      running = std::max(running, dev_time[i]);
      if (in.type == InstrType::kAlloc) buffer_name[in.buffer] = static_cast<int32_t>(in.name);
      if (in.type == InstrType::kAlloc || in.type == InstrType::kFree) {
        auto nm = buffer_name.find(in.buffer);
        time_of[in.host_seq] = Placed{running, nm == buffer_name.end() ? -1 : nm->second, next_op[i]};
      }
      if (in.type == InstrType::kMarker && instr_name(prog, in) == "step end") {
        step_end.push_back(rt.times[i].start);
        step_marker.push_back(static_cast<long>(i));
      }
      if (in.type == InstrType::kCollective && in.step == last_step)
        ++c.collectives_per_step[static_cast<int>(in.coll)];
    }
    std::vector<TimelinePoint> pts;
    // Only the first rank of each class has a timeline (a copied rank shares its recording).
    static const std::vector<MemoryEvent> kNoEvents;
    const auto& events = timeline_rank[static_cast<size_t>(c.representative)] ? mem.timeline() : kNoEvents;
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
        c.in_flight_at_peak.push_back(
            {std::string(stream_name(in.stream)), std::string(instr_name(prog, in)), t.start, t.end});
    }
    // The last step's duration and its compute / exposed communication.
    if (!step_end.empty() && rt.completed) {
      double end = step_end.back();
      double begin = step_end.size() >= 2 ? step_end[step_end.size() - 2] : 0.0;
      c.last_step_s = end - begin;
      if (rep.last_step_rank < 0 || end - begin > rep.step_time_s) {
        const long begin_marker = step_marker.size() >= 2 ? step_marker[step_marker.size() - 2] : -1;
        rep.last_step = step_breakdown(prog, rt, begin_marker, step_marker.back(), cost.launch_overhead_seconds());
        rep.last_step_rank = c.representative;
      }
      rep.step_time_s = std::max(rep.step_time_s, end - begin);
    }
    c.compute_s = rt.compute_s;
    c.exposed_comm_s = rt.exposed_comm_s;
    c.comm_s = rt.comm_s;
    rep.compute_s = std::max(rep.compute_s, rt.compute_s);
    rep.exposed_comm_s = std::max(rep.exposed_comm_s, rt.exposed_comm_s);
    rep.comm_s = std::max(rep.comm_s, rt.comm_s);
    rep.classes.push_back(std::move(c));
  }
  // Whole-run compute / exposed figures are per step on average.
  if (s.training.steps > 0) {
    rep.compute_s /= s.training.steps;
    rep.exposed_comm_s /= s.training.steps;
    rep.comm_s /= s.training.steps;
  }
  const auto& m = s.model;
  // Tokens per GPU per step: the mean over ranks when the batch is uneven.
  double batch = 0;
  for (int r = 0; r < s.world_size(); ++r) batch += static_cast<double>(s.training.batch_for(r));
  batch /= std::max(1, s.world_size());
  const double tokens = batch * s.training.seq_len * s.training.grad_accum_steps;
  rep.model_flops_per_token = model_flops_per_token(m, s.training.seq_len);  // torchtitan's count
  if (rep.step_time_s > 0) {
    rep.tokens_per_s_per_gpu = tokens / rep.step_time_s;
    const HardwareProfile& hw = s.hardware.device;
    bool low = s.fsdp.mixed_precision.param_dtype && *s.fsdp.mixed_precision.param_dtype != DType::kFloat32;
    double peak = low ? hw.peak_flops_bf16 : hw.peak_flops_fp32;
    if (peak > 0) rep.mfu = rep.model_flops_per_token * rep.tokens_per_s_per_gpu / peak;
  }
  if (opt.on_played) opt.on_played(PlayedRun{programs, groups.groups(), er, cost, rep});
  return rep;
}

}  // namespace fullshard::sim
