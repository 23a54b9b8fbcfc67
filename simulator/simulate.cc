#include "simulator/simulate.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/fsdp/shard_layout.h"
#include "core/mesh/device_mesh.h"
#include "core/model/model_flops.h"
#include "core/model/moe_routing.h"
#include "core/train/training_program.h"
#include "simulator/checkpoint_play.h"
#include "simulator/cost/hardware_cost_model.h"
#include "simulator/play_assemble.h"
#include "simulator/play_record.h"
#include "simulator/sim_limits.h"

namespace fullshard::sim {

// NOTE [Rank classes in linear time]: a rank's program depends on its shard group's size, its
// index in it, its micro-batch, with pipeline parallelism its pp index (its stages) and with
// context parallelism its cp index (its ring-attention rounds). Both come
// from the rank's mesh coordinates (the group along the shard dimension is ordered by that
// coordinate, as DeviceMesh::group builds it), so no group is built per rank (that was quadratic in
// the world size), and a parameter's local rows depend only on its first dimension, so the key
// holds each distinct first dimension once.
std::vector<std::vector<int>> rank_classes(const Scenario& s) {
  const int world = s.world_size();
  // Local shapes are alike on every tp and ep rank; expert-parallel weights shard over efsdp
  // (below), not the shard dim.
  Transformer model(s.model, tensor_parallel_for(s, 0), expert_parallel_for(s, 0));
  std::vector<int64_t> rows;
  model.root().for_each_param([&](Param& p) {
    if (p.ep_degree == 1) rows.push_back(p.shape[0]);
  });
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const DeviceMesh mesh(s.fsdp.mesh_shape, s.fsdp.mesh_dim_names);
  int shard = mesh.dim_index("shard");
  if (shard < 0) shard = mesh.ndim() - 1;  // as mesh_info_for
  // With a cp dim FSDP's group is the flattened (shard, cp): its index is shard x cp + cp, the
  // row-major index over the two adjacent dims (mesh_info_for), so they count as one dim here.
  const int cp_dim = mesh.dim_index("cp");
  const int cp = cp_dim < 0 ? 1 : mesh.shape()[static_cast<size_t>(cp_dim)];
  const int last = cp_dim < 0 ? shard : cp_dim;
  const int w = mesh.shape()[static_cast<size_t>(shard)] * cp;
  int stride = 1;  // of the (shard, cp) coordinate in the row-major rank
  for (int d = mesh.ndim() - 1; d > last; --d) stride *= mesh.shape()[static_cast<size_t>(d)];
  std::map<std::vector<int64_t>, std::vector<int>> by_key;
  // Played checkpoint saves (NOTE [Playing a checkpoint save]): writers differ from the rest,
  // and rank 0 from its peers when it also writes the persistent buffers.
  const bool saves = s.training.checkpoint.every > 0;
  const bool buffers = saves && saves_buffers(s);
  const int pp_dim = mesh.dim_index("pp");  // outermost: the pp index is r / pp_stride
  const int pp_stride = pp_dim < 0 ? 0 : mesh.size() / mesh.shape()[static_cast<size_t>(pp_dim)];
  // Expert parallelism: a rank's experts' local rows (their efsdp index) and what it receives
  // in the all-to-all and computes (its ep index: NOTE [Expert-parallel routing]).
  const int ep = s.expert_parallel.degree;
  const MoeConfig& moe = s.model.moe;
  // A recorded routing is each rank's own (NOTE [Recorded routing]): every rank is its own class.
  const bool recorded = s.training.moe_routing_record != nullptr;
  std::vector<int64_t> key(rows.size() + 1 + (ep > 1 ? 3 : 0) + (saves ? 1 : 0) +
                           (pp_dim < 0 ? 0 : 1) + (cp > 1 ? 1 : 0) + (recorded ? 1 : 0));
  for (int r = 0; r < world; ++r) {
    const int idx = (r / stride) % w;
    for (size_t i = 0; i < rows.size(); ++i) key[i] = shard_rows(rows[i], w, idx);
    key[rows.size()] = s.training.batch_for(r);  // an uneven batch changes the program too
    size_t k = rows.size() + 1;
    if (ep > 1) {
      const int64_t local = moe.num_experts / ep, efsdp = w / ep;
      const EpRouting er =
          ep_routing(assumed_tokens_per_expert(moe, s.training.batch_for(r) * s.training.seq_len, ep),
                     ep, idx % ep);
      key[k++] = efsdp * ep > moe.num_experts ? 0 : shard_rows(local, efsdp, idx / ep);
      key[k++] = er.recv_rows[0];
      key[k++] = grouped_rows(er.local_tokens_per_expert, moe.token_group_align);
    }
    if (saves) key[k++] = writes_checkpoint(s, r) ? (buffers && r == 0 ? 2 : 1) : 0;
    if (pp_dim >= 0) key[k++] = r / pp_stride;
    // Ring attention's rounds differ by cp index (NOTE [Ring attention rounds]).
    if (cp > 1) key[k++] = idx % cp;
    if (recorded) key[k++] = r;
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
  const bool low =
      s.fsdp.mixed_precision.param_dtype.value_or(s.training.orig_dtype) != DType::kFloat32;
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

// The time model that plays the programs, and its name in the report.
std::unique_ptr<CostModel> make_cost_model(const Scenario& s, TimeModel model, std::string& name) {
  if (model == TimeModel::kPlaceholder) {
    name = "placeholder";
    return std::make_unique<PlaceholderCostModel>(cost_options(s));
  }
  ComputeOptions co;
  co.pinned_memory = s.fsdp.pin_memory;
  co.host_threads_per_rank = s.hardware.host_threads_per_rank;
  if (s.training.checkpoint.storage_write_bandwidth > 0)
    co.storage_write_bandwidth = s.training.checkpoint.storage_write_bandwidth;
  name = "nccl+roofline";
  return std::make_unique<HardwareCostModel>(
      s.hardware.device, ClusterLayout{s.hardware.nodes, s.hardware.gpus_per_node}, co);
}

// A straggler (hardware.rank_speed) or an uneven batch makes ranks differ: every rank is
// simulated.
bool ranks_differ(const Scenario& s) {
  bool uneven = false;
  for (const auto& [rank, speed] : s.hardware.rank_speed) uneven |= speed != 1.0;
  return uneven || s.training.uneven_batch();
}

// The engine's options for the recorded programs (one per rank when every rank is played).
EngineOptions engine_options(const Scenario& s, const RecordedPrograms& rec, bool all_ranks,
                             bool checks) {
  EngineOptions eo;
  eo.symmetric = !all_ranks;
  if (ranks_differ(s)) {
    for (const auto& cls : rec.classes) {
      auto it = s.hardware.rank_speed.find(cls.front());
      eo.speed.push_back(it == s.hardware.rank_speed.end() ? 1.0 : it->second);
    }
  }
  eo.checks = checks;
  // NOTE [Free rule]: FSDP2 frees cross-stream buffers (the reduce-scatter output after the
  // optimizer, the HSDP all-reduce input at finalize) before their pool's stream has waited
  // on the last use; it is safe because every later allocation from that pool happens after
  // such a wait. So a hazard is reported when freed memory is reused unordered, not at free.
  eo.check.free_rule = FreeRule::kAtReuse;
  return eo;
}

// One play of `s`, whose training.steps are the steps to play, for a run of `steps` steps
// (NOTE [Steady state] in extrapolate.cc), in three parts: record the host programs
// (play_record.h), play them on the engine, assemble the report (play_assemble.h). With
// `may_play_more`, a play whose last two steps are not steady returns nullopt (the caller
// plays more steps) before on_played is called.
std::optional<SimulationReport> play_steps(const Scenario& s, int steps, const SimulateOptions& opt,
                                           bool may_play_more) {
  SimulationReport rep;
  rep.steps = steps;
  rep.simulated_steps = s.training.steps;
  rep.scenario = s.name;
  if (s.training.init == ModelInit::kDevice) rep.init = "device";
  if (s.training.init == ModelInit::kBroadcastFromRank0) rep.init = "broadcast_from_rank0";
  rep.world_size = s.world_size();
  const bool all_ranks = opt.all_ranks || ranks_differ(s);
  rep.simulated_all_ranks = all_ranks;
  rep.symmetric_memory_bytes = symmetric_memory_bytes(s);
  rep.capacity_bytes = s.hardware.allocator.capacity_bytes -
                       std::min(s.hardware.allocator.capacity_bytes, rep.symmetric_memory_bytes);
  rep.parameters = parameter_count(s.model);
  if (s.model.lora.enabled() || !s.training.frozen.empty()) {
    const ParameterCounts n = count_parameters(s);
    rep.trainable_parameters = n.trainable;
    rep.lora_parameters = n.adapters;
  }

  GroupRegistry groups;
  RecordOptions ro;
  ro.all_ranks = all_ranks;
  ro.record_every_rank = opt.record_every_rank;
  ro.play_checkpoint = opt.play_checkpoint;
  ro.memory_timeline = opt.memory_timeline;
  ro.run_steps = steps;
  ro.mutate_program = opt.mutate_program;
  ro.progress = opt.progress;
  const RecordedPrograms rec = record_programs(s, ro, groups);

  const std::unique_ptr<CostModel> cost = make_cost_model(s, opt.time_model, rep.time_model);
  EngineResult er =
      simulate(rec.programs, groups.groups(), *cost, engine_options(s, rec, all_ranks, opt.checks));
  rep.problems = er.problems;
  rep.events_processed = er.events_processed;

  AssembleOptions ao;
  ao.steps = steps;
  ao.max_timeline_points = opt.max_timeline_points;
  ao.may_play_more = may_play_more;
  ao.play_checkpoint = opt.play_checkpoint;
  std::optional<SimulationReport> out =
      assemble_report(std::move(rep), s, rec, er, *cost, groups.groups(), ao);
  if (out && opt.on_played)
    opt.on_played(PlayedRun{rec.programs, groups.groups(), er, *cost, *out});
  return out;
}

}  // namespace

SimulationReport simulate_scenario(const Scenario& s, const SimulateOptions& opt) {
  const int steps = s.training.steps;
  // A recorded routing gives every step requests of its own (NOTE [Recorded routing]), and a
  // generate pass every N > 1 steps makes steps differ: the steady state of NOTE [Steady state]
  // does not hold, so such a run plays every step.
  const bool every_step = opt.simulated_steps <= 0 || opt.simulated_steps >= steps ||
                          s.training.moe_routing_record != nullptr ||
                          s.training.generate_every > 1;
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
