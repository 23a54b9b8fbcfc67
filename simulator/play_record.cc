#include "simulator/play_record.h"

#include <algorithm>
#include <unordered_map>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "core/train/pipeline_program.h"
#include "core/train/training_program.h"
#include "simulator/checkpoint_play.h"
#include "simulator/simulate.h"

namespace fullshard::sim {

namespace {

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
  if (a.pp_group && b.pp_group) map[groups.intern(*a.pp_group)] = groups.intern(*b.pp_group);
  if (a.cp_group && b.cp_group) map[groups.intern(*a.cp_group)] = groups.intern(*b.cp_group);
  const std::vector<ProcessGroup> pa = pipeline_p2p_groups(s, from),
                                  pb = pipeline_p2p_groups(s, to);
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i)
    map[groups.intern(pa[i])] = groups.intern(pb[i]);
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

// `like`: a program recorded before for another class (nullptr: none), whose sizes the new
// program's are reserved at (classes differ in a few rows of some parameters, not in ops).
Recorded record_rank(const Scenario& s, int rank, GroupRegistry& groups, bool timeline,
                     int run_steps, bool play_checkpoint, const Program* like) {
  Recorded r;
  AllocatorOptions device = s.hardware.allocator;
  device.capacity_bytes -= std::min(device.capacity_bytes, symmetric_memory_bytes(s));
  r.backend = std::make_unique<SimBackend>(rank, s.world_size(), device, groups, timeline);
  SimBackend& b = *r.backend;
  if (like) {
    b.program().instrs.reserve(like->instrs.size());
    b.program().accesses.reserve(like->accesses.size());
  }
  std::unique_ptr<TrainingProgram> prog;
  try {
    prog = std::make_unique<TrainingProgram>(b, s);
    r.init_peak_allocated_bytes = b.memory().allocator_stats().peak_allocated_bytes;
    r.init_peak_reserved_bytes = b.memory().allocator_stats().peak_reserved_bytes;
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
    o.step = prog ? b.step() : -1;  // -1: the model's initialisation
    r.oom = o;
  }
  b.truncate();  // teardown frees are not part of the run
  prog.reset();
  return r;
}

}  // namespace

RecordedPrograms record_programs(const Scenario& s, const RecordOptions& opt,
                                 GroupRegistry& groups) {
  RecordedPrograms out;
  const int world = s.world_size();
  // With every rank played, memory timelines are kept only for the first rank of each class
  // of identical ranks (they are the same for the others).
  out.classes = rank_classes(s);
  out.timeline_rank.assign(static_cast<size_t>(world), false);
  std::vector<int> class_first(static_cast<size_t>(world), -1);  // rank -> its class's first
  for (const auto& c : out.classes) {
    out.timeline_rank[static_cast<size_t>(c.front())] = opt.memory_timeline;
    for (int r : c) class_first[static_cast<size_t>(r)] = c.front();
  }
  if (opt.all_ranks) {
    out.classes.clear();
    for (int r = 0; r < world; ++r) out.classes.push_back({r});
  }
  std::vector<long> rec_of_rank(static_cast<size_t>(world), -1);  // rank -> its program
  size_t last_recorded = SIZE_MAX;  // the program recorded last (its sizes are reserved)
  out.programs.reserve(out.classes.size());
  for (const auto& cls : out.classes) {
    const int rank = cls.front();
    const int first = class_first[static_cast<size_t>(rank)];
    // As NOTE [Shared recording] (above): with every rank played, a rank whose class's first rank
    // was already recorded gets a copy of that program with its own process groups, unless
    // record_every_rank asks for a recording of its own.
    const long from = rec_of_rank[static_cast<size_t>(first)];
    std::optional<Program> copied;
    if (!opt.record_every_rank && !opt.mutate_program && first != rank && from >= 0)
      copied = program_for_rank(s, out.programs[static_cast<size_t>(from)], first, rank, groups);
    if (copied) {
      out.rec_of.push_back(out.rec_of[static_cast<size_t>(from)]);
      out.programs.push_back(std::move(*copied));
    } else {
      const Program* like = last_recorded == SIZE_MAX ? nullptr : &out.programs[last_recorded];
      out.recs.push_back(record_rank(s, rank, groups, out.timeline_rank[static_cast<size_t>(rank)],
                                     opt.run_steps, opt.play_checkpoint, like));
      out.rec_of.push_back(out.recs.size() - 1);
      out.programs.push_back(std::move(out.recs.back().backend->program()));
      out.rec_instructions.push_back(out.programs.back().instrs.size());
      last_recorded = out.programs.size() - 1;
      if (opt.mutate_program) opt.mutate_program(out.programs.back());
    }
    rec_of_rank[static_cast<size_t>(rank)] = static_cast<long>(out.programs.size() - 1);
    if (opt.progress) opt.progress(out.programs.size(), out.classes.size());
  }
  return out;
}

}  // namespace fullshard::sim
