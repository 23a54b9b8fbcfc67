#include "simulator/planner/bounds.h"

#include <algorithm>
#include <limits>

#include "core/common/error.h"
#include "core/fsdp/shard_layout.h"
#include "core/train/training_program.h"
#include "simulator/engine/diagnostics.h"
#include "simulator/simulate.h"

namespace fullshard::planner {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Kernels over every parameter at once (NOTE [Block bounds]): their size grows with the model,
// so the proxy's cost says nothing certain about the full model's.
bool aggregate_op(std::string_view name) {
  return starts_with(name, "optimizer.step") || starts_with(name, "clip_grad_norm");
}

}  // namespace

ParamRows param_rows(const ModelConfig& m) {
  ParamRows out;
  Transformer model(m);
  model.root().for_each_param([&](Param& p) {
    int64_t per_row = 1;
    for (size_t d = 1; d < p.shape.size(); ++d) per_row *= p.shape[d];
    out.emplace_back(p.shape[0], per_row);
  });
  return out;
}

namespace {

// Elements of `rank`'s local (unpadded) shards over every parameter (`rows`: param_rows of
// s.model): what the aggregate kernels' FLOPs and bytes are proportional to
// (core/optim/adamw.cc).
double local_elements(const ParamRows& rows, const Scenario& s, int rank) {
  const MeshInfo mi = mesh_info_for(s, rank);
  const int w = mi.shard_group.size();
  const int idx = mi.shard_group.index_of(rank);
  double n = 0;
  for (const auto& [r, per_row] : rows)
    n += static_cast<double>(shard_rows(r, w, idx)) * static_cast<double>(per_row);
  return n;
}

ActivationCheckpointing uniform(BlockCheckpoint mode) {
  ActivationCheckpointing ac;
  ac.mode = mode == BlockCheckpoint::kFull          ? RecomputeMode::kFull
            : mode == BlockCheckpoint::kOpSelective ? RecomputeMode::kSelectiveOp
                                                    : RecomputeMode::kNone;
  return ac;
}

long last_marker(const sim::Program& p, std::string_view label) {
  for (size_t i = p.instrs.size(); i-- > 0;)
    if (p.instrs[i].type == sim::InstrType::kMarker && sim::instr_name(p, p.instrs[i]) == label)
      return static_cast<long>(i);
  return -1;
}

// `scale`: the full model's local elements over the proxy's (NOTE [Block bounds]).
void measure_time(const sim::Program& p, const sim::PlayedRun& run, int last_step, double scale,
                  ClassProfile& cp) {
  const double launch = run.cost.launch_overhead_seconds();
  for (const sim::Instr& in : p.instrs) {
    if (in.step != last_step) continue;
    if (in.type != sim::InstrType::kKernel && in.type != sim::InstrType::kCollective) continue;
    const std::string_view name = sim::instr_name(p, in);
    const int owner = block_of(name);
    auto& acc = owner == 0 ? cp.block0_s : owner == 1 ? cp.block1_s : cp.root_s;
    acc[ClassProfile::kHost] += launch;
    double s;
    if (in.type == sim::InstrType::kCollective) {
      s = run.cost.collective_seconds(in, run.groups[in.group]);
      double& sd = cp.slowdown[static_cast<int>(in.stream)];
      sd = std::min(
          sd, std::min(0.95, run.cost.collective_load(in, run.groups[in.group]).compute_slowdown));
    } else if (aggregate_op(name)) {
      sim::Instr full = in;
      full.flops *= scale;
      full.bytes *= scale;
      s = run.cost.kernel_seconds(full);
    } else {
      s = run.cost.kernel_seconds(in);
    }
    acc[static_cast<int>(in.stream)] += s;
    if (in.type == sim::InstrType::kKernel && in.stream == StreamRole::kDefault &&
        in.place == sim::KernelPlace::kDevice)
      (owner == 0 ? cp.block0_device : owner == 1 ? cp.block1_device : cp.root_device) += s;
  }
}

void measure_memory(const sim::Program& p, ClassProfile& cp) {
  const long backward = last_marker(p, "backward");
  const long optimizer = last_marker(p, "optimizer");
  FULLSHARD_CHECK(backward >= 0 && optimizer > backward,
                  "proxy program without backward / optimizer markers");
  // The live device buffers by id (a recording numbers its buffers from 1 up): bytes and owner
  // (-1 root, 0 or 1 a block; kFreed: not live).
  constexpr int kFreed = -2;
  struct Live {
    uint64_t bytes = 0;
    int owner = kFreed;
  };
  uint64_t max_id = 0;
  for (const sim::Instr& in : p.instrs)
    if (!in.on_host && in.type == sim::InstrType::kAlloc) max_id = std::max(max_id, in.buffer);
  std::vector<Live> live(max_id + 1);
  // Pass 1: the owner of every device alloc / free, to find the window: from the last block
  // event before the last backward marker to the first block event after it.
  long start = -1, end = static_cast<long>(p.instrs.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const sim::Instr& in = p.instrs[i];
    if (in.on_host || (in.type != sim::InstrType::kAlloc && in.type != sim::InstrType::kFree))
      continue;
    int owner;
    if (in.type == sim::InstrType::kAlloc) {
      owner = block_of(sim::instr_name(p, in));
      live[in.buffer] = {in.size, owner};
    } else {
      FULLSHARD_CHECK(in.buffer <= max_id && live[in.buffer].owner != kFreed,
                      "proxy program frees a buffer it never allocated");
      owner = live[in.buffer].owner;
      live[in.buffer].owner = kFreed;
    }
    if (owner < 0) continue;
    const long li = static_cast<long>(i);
    if (li < backward) start = li;
    if (li > backward && end == static_cast<long>(p.instrs.size())) end = li;
  }
  // Pass 2: live bytes by owner (the owners found in pass 1).
  uint64_t sums[3] = {0, 0, 0};  // root, block 0, block 1
  auto slot = [](int owner) { return owner < 0 ? 0 : owner + 1; };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const sim::Instr& in = p.instrs[i];
    const long li = static_cast<long>(i);
    if (li == optimizer) {
      cp.opt_root = sums[0];
      cp.opt_block0 = sums[1];
      cp.opt_block1 = sums[2];
    }
    if (in.on_host || (in.type != sim::InstrType::kAlloc && in.type != sim::InstrType::kFree))
      continue;
    if (in.type == sim::InstrType::kAlloc) {
      const int owner = block_of(sim::instr_name(p, in));
      live[in.buffer] = {in.size, owner};
      sums[slot(owner)] += in.size;
    } else {
      Live& l = live[in.buffer];
      sums[slot(l.owner)] -= l.bytes;
      l.owner = kFreed;
    }
    if (li >= start && li < end) {  // the state after this event lies inside the window
      cp.window_root = std::max(cp.window_root, sums[0]);
      cp.window_block0 = sums[1];
      cp.window_block1 = sums[2];
    }
  }
}

}  // namespace

int block_of(std::string_view name) {
  if (!starts_with(name, "layers.")) return -1;
  size_t i = 7;
  int v = 0;
  bool digits = false;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') {
    v = v * 10 + (name[i] - '0');
    ++i;
    digits = true;
  }
  if (!digits || (i < name.size() && name[i] != '.' && name[i] != ' ')) return -1;
  return v;
}

ProxyProfile profile_proxy(const Scenario& full, BlockCheckpoint mode, const ParamRows* full_rows,
                           const ParamRows* proxy_rows) {
  FULLSHARD_CHECK(full.model.n_layers >= 2, "a proxy needs a model of at least 2 blocks");
  Scenario s = full;
  s.model.n_layers = 2;
  s.training.activation_checkpointing = uniform(mode);
  s.hardware.allocator.expandable_segments = true;
  s.hardware.allocator.capacity_bytes = std::numeric_limits<uint64_t>::max();
  ProxyProfile out;
  sim::SimulateOptions o;
  o.checks = false;
  o.memory_timeline = false;  // not read
  o.play_checkpoint = false;  // the proxies measure training alone
  const int last_step = s.training.steps - 1;
  // Building the full model's parameters (723 for a 70B) per rank class was a fifth of plan's
  // time: once per call, or once per model by the caller.
  const ParamRows own_proxy_rows = proxy_rows ? ParamRows{} : param_rows(s.model);
  if (!proxy_rows) proxy_rows = &own_proxy_rows;
  const ParamRows own_full_rows = full_rows ? ParamRows{} : param_rows(full.model);
  if (!full_rows) full_rows = &own_full_rows;
  o.on_played = [&](const sim::PlayedRun& run) {
    for (const sim::Program& p : run.programs) {
      ClassProfile cp;
      const double proxy_elements = local_elements(*proxy_rows, s, p.rank);
      const double scale =
          proxy_elements > 0 ? local_elements(*full_rows, full, p.rank) / proxy_elements : 1.0;
      measure_time(p, run, last_step, scale, cp);
      // A rank that ran out of memory stopped early: no optimizer marker (see below).
      if (last_marker(p, "optimizer") >= 0) measure_memory(p, cp);
      out.classes.push_back(cp);
    }
  };
  const sim::SimulationReport r = sim::simulate_scenario(s, o);
  // NOTE [Proxy out of memory]: "unlimited" capacity is still finite (the allocator reserves
  // at most 1 TiB of address space per segment source, core/memory/caching_allocator.cc), so a
  // proxy of a huge step (llama3.1-8b at --seq-len 524288 and micro-batch 8) can run out of
  // memory. What it had allocated plus the request it failed on is live at once in the proxy
  // and so in the full model: a valid lower bound on the peak, far above any GPU's capacity.
  // Its time bound is what the last step measured before the failure (a lower bound, often 0).
  FULLSHARD_CHECK(r.classes.size() == out.classes.size(),
                  "proxy report and played programs differ in classes");
  for (size_t ci = 0; ci < r.classes.size(); ++ci) {
    const auto& oom = r.classes[ci].oom;
    if (!oom) continue;
    ClassProfile& cp = out.classes[ci];
    const uint64_t live = oom->at_failure.allocated_bytes;
    cp.window_root = cp.opt_root =
        live > std::numeric_limits<uint64_t>::max() - oom->requested_bytes
            ? live
            : live + oom->requested_bytes;
    cp.window_block0 = cp.window_block1 = cp.opt_block0 = cp.opt_block1 = 0;
  }
  return out;
}

Bounds combine_bounds(const std::array<const ProxyProfile*, 3>& proxies,
                      const std::vector<BlockCheckpoint>& blocks) {
  FULLSHARD_CHECK(blocks.size() >= 2, "block bounds need at least 2 blocks");
  const ProxyProfile* any = nullptr;
  for (BlockCheckpoint m : blocks) {
    const ProxyProfile* p = proxies[static_cast<int>(m)];
    FULLSHARD_CHECK(p != nullptr, "combine_bounds: a mode's proxy is missing");
    if (any)
      FULLSHARD_CHECK(p->classes.size() == any->classes.size(),
                      "proxies with different rank classes");
    any = p;
  }
  Bounds b;
  for (size_t ci = 0; ci < any->classes.size(); ++ci) {
    auto prof = [&](BlockCheckpoint m) -> const ClassProfile& {
      return proxies[static_cast<int>(m)]->classes[ci];
    };
    // The root's share is the same in every proxy (the root's work does not depend on the
    // blocks' checkpointing); the smallest keeps the bound safe regardless.
    std::array<double, kNumStreams + 1> time{};
    time.fill(std::numeric_limits<double>::infinity());
    uint64_t window = std::numeric_limits<uint64_t>::max(),
             opt = std::numeric_limits<uint64_t>::max();
    double device = std::numeric_limits<double>::infinity();
    std::array<double, kNumStreams> slowdown;
    slowdown.fill(1.0);
    for (BlockCheckpoint m : blocks) {
      for (int s = 0; s <= kNumStreams; ++s) time[s] = std::min(time[s], prof(m).root_s[s]);
      for (int s = 0; s < kNumStreams; ++s)
        slowdown[s] = std::min(slowdown[s], prof(m).slowdown[s]);
      device = std::min(device, prof(m).root_device);
      window = std::min(window, prof(m).window_root);
      opt = std::min(opt, prof(m).opt_root);
    }
    const size_t last = blocks.size() - 1;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const ClassProfile& c = prof(blocks[i]);
      for (int s = 0; s <= kNumStreams; ++s) time[s] += i == last ? c.block1_s[s] : c.block0_s[s];
      device += i == last ? c.block1_device : c.block0_device;
      window += i == last ? c.window_block1 : c.window_block0;
      opt += i == last ? c.opt_block1 : c.opt_block0;
    }
    for (int s = 0; s <= kNumStreams; ++s) b.step_time_s = std::max(b.step_time_s, time[s]);
    for (int s = 0; s < kNumStreams; ++s)
      if (s != static_cast<int>(StreamRole::kDefault) && slowdown[s] < 1.0)
        b.step_time_s = std::max(b.step_time_s, device + slowdown[s] * time[s]);
    b.peak_bytes = std::max({b.peak_bytes, window, opt});
  }
  return b;
}

}  // namespace fullshard::planner
