#include "simulator/planner/bounds.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "core/common/error.h"
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

ActivationCheckpointing uniform(BlockCheckpoint mode) {
  ActivationCheckpointing ac;
  ac.mode = mode == BlockCheckpoint::kFull          ? CheckpointMode::kFull
            : mode == BlockCheckpoint::kOpSelective ? CheckpointMode::kSelectiveOp
                                                    : CheckpointMode::kNone;
  return ac;
}

long last_marker(const sim::Program& p, std::string_view label) {
  for (size_t i = p.instrs.size(); i-- > 0;)
    if (p.instrs[i].type == sim::InstrType::kMarker && sim::instr_name(p, p.instrs[i]) == label)
      return static_cast<long>(i);
  return -1;
}

void measure_time(const sim::Program& p, const sim::PlayedRun& run, int last_step, ClassProfile& cp) {
  for (const sim::Instr& in : p.instrs) {
    if (in.step != last_step) continue;
    if (in.type != sim::InstrType::kKernel && in.type != sim::InstrType::kCollective) continue;
    const std::string_view name = sim::instr_name(p, in);
    if (aggregate_op(name)) continue;
    const double s = in.type == sim::InstrType::kKernel ? run.cost.kernel_seconds(in)
                                                        : run.cost.collective_seconds(in, run.groups[in.group]);
    const int owner = block_of(name);
    auto& acc = owner == 0 ? cp.block0_s : owner == 1 ? cp.block1_s : cp.root_s;
    acc[static_cast<int>(in.stream)] += s;
  }
}

void measure_memory(const sim::Program& p, ClassProfile& cp) {
  const long backward = last_marker(p, "backward");
  const long optimizer = last_marker(p, "optimizer");
  FULLSHARD_CHECK(backward >= 0 && optimizer > backward, "proxy program without backward / optimizer markers");
  struct Live {
    uint64_t bytes;
    int owner;
  };
  // Pass 1: the owner of every device alloc / free, to find the window: from the last block
  // event before the last backward marker to the first block event after it.
  std::unordered_map<uint64_t, Live> live;
  long start = -1, end = static_cast<long>(p.instrs.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const sim::Instr& in = p.instrs[i];
    if (in.on_host || (in.type != sim::InstrType::kAlloc && in.type != sim::InstrType::kFree)) continue;
    int owner;
    if (in.type == sim::InstrType::kAlloc) {
      owner = block_of(sim::instr_name(p, in));
      live[in.buffer] = {in.size, owner};
    } else {
      auto it = live.find(in.buffer);
      FULLSHARD_CHECK(it != live.end(), "proxy program frees a buffer it never allocated");
      owner = it->second.owner;
      live.erase(it);
    }
    if (owner < 0) continue;
    const long li = static_cast<long>(i);
    if (li < backward) start = li;
    if (li > backward && end == static_cast<long>(p.instrs.size())) end = li;
  }
  // Pass 2: live bytes by owner.
  live.clear();
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
    if (in.on_host || (in.type != sim::InstrType::kAlloc && in.type != sim::InstrType::kFree)) continue;
    if (in.type == sim::InstrType::kAlloc) {
      const int owner = block_of(sim::instr_name(p, in));
      live[in.buffer] = {in.size, owner};
      sums[slot(owner)] += in.size;
    } else {
      auto it = live.find(in.buffer);
      sums[slot(it->second.owner)] -= it->second.bytes;
      live.erase(it);
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

ProxyProfile profile_proxy(const Scenario& full, BlockCheckpoint mode) {
  FULLSHARD_CHECK(full.model.n_layers >= 2, "a proxy needs a model of at least 2 blocks");
  Scenario s = full;
  s.model.n_layers = 2;
  s.training.activation_checkpointing = uniform(mode);
  s.hardware.allocator.expandable_segments = true;
  s.hardware.allocator.capacity_bytes = std::numeric_limits<uint64_t>::max();
  ProxyProfile out;
  sim::SimulateOptions o;
  o.checks = false;
  o.max_timeline_points = 2;
  const int last_step = s.training.steps - 1;
  o.on_played = [&](const sim::PlayedRun& run) {
    for (const sim::Program& p : run.programs) {
      ClassProfile cp;
      measure_time(p, run, last_step, cp);
      measure_memory(p, cp);
      out.classes.push_back(cp);
    }
  };
  sim::simulate_scenario(s, o);
  return out;
}

Bounds combine_bounds(const std::array<const ProxyProfile*, 3>& proxies, const std::vector<BlockCheckpoint>& blocks) {
  FULLSHARD_CHECK(blocks.size() >= 2, "block bounds need at least 2 blocks");
  const ProxyProfile* any = nullptr;
  for (BlockCheckpoint m : blocks) {
    const ProxyProfile* p = proxies[static_cast<int>(m)];
    FULLSHARD_CHECK(p != nullptr, "combine_bounds: a mode's proxy is missing");
    if (any) FULLSHARD_CHECK(p->classes.size() == any->classes.size(), "proxies with different rank classes");
    any = p;
  }
  Bounds b;
  for (size_t ci = 0; ci < any->classes.size(); ++ci) {
    auto prof = [&](BlockCheckpoint m) -> const ClassProfile& { return proxies[static_cast<int>(m)]->classes[ci]; };
    // The root's share is the same in every proxy (the root's work does not depend on the
    // blocks' checkpointing); the smallest keeps the bound safe regardless.
    std::array<double, kNumStreams> time{};
    time.fill(std::numeric_limits<double>::infinity());
    uint64_t window = std::numeric_limits<uint64_t>::max(), opt = std::numeric_limits<uint64_t>::max();
    for (BlockCheckpoint m : blocks) {
      for (int s = 0; s < kNumStreams; ++s) time[s] = std::min(time[s], prof(m).root_s[s]);
      window = std::min(window, prof(m).window_root);
      opt = std::min(opt, prof(m).opt_root);
    }
    const size_t last = blocks.size() - 1;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const ClassProfile& c = prof(blocks[i]);
      for (int s = 0; s < kNumStreams; ++s) time[s] += i == last ? c.block1_s[s] : c.block0_s[s];
      window += i == last ? c.window_block1 : c.window_block0;
      opt += i == last ? c.opt_block1 : c.opt_block0;
    }
    for (int s = 0; s < kNumStreams; ++s) b.step_time_s = std::max(b.step_time_s, time[s]);
    b.peak_bytes = std::max({b.peak_bytes, window, opt});
  }
  return b;
}

}  // namespace fullshard::planner
