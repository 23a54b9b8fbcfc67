#pragma once
// Programs and cost models shared by the engine tests.
#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "simulator/engine/cost_model.h"
#include "simulator/engine/engine.h"
#include "simulator/engine/program_builder.h"

namespace fullshard::sim {
inline std::ostream& operator<<(std::ostream& os, const InstrTime& t) {
  return os << "{issue " << t.issue << ", start " << t.start << ", end " << t.end << "}";
}
}  // namespace fullshard::sim

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

namespace fullshard::sim::testing {

using S = StreamRole;

// Exact numbers for hand-written expectations: a kernel takes `flops` seconds, a collective
// coll_bytes / 1000 seconds, whatever the group size.
class UnitCost final : public CostModel {
 public:
  explicit UnitCost(double launch_s = 0) : launch_s_(launch_s) {}
  double kernel_seconds(const Instr& k) const override { return k.flops; }
  double collective_seconds(const Instr& c, const GroupInfo&) const override {
    return static_cast<double>(c.coll_bytes) / 1000.0;
  }
  double launch_overhead_seconds() const override { return launch_s_; }

 private:
  double launch_s_;
};

inline bool has_problem(const std::vector<Problem>& ps, ProblemKind kind) {
  return std::any_of(ps.begin(), ps.end(), [&](const Problem& p) { return p.kind == kind; });
}

inline std::string all_messages(const std::vector<Problem>& ps) {
  std::string out;
  for (const Problem& p : ps)
    out += std::string(problem_kind_name(p.kind)) + ": " + p.message + "\n";
  return out;
}

// What a wait in an FSDP-like program protects; removing it must produce this problem.
struct NeededWait {
  size_t instr = 0;
  ProblemKind kind = ProblemKind::kStreamRace;
};

struct FsdpShape {
  int layers = 2;
  int steps = 1;
  bool prefetch = false;        // issue layer l+1's all-gather before layer l's compute
  bool sync_each_step = false;  // device synchronize at the end of each step
  uint32_t group = 0;
  uint64_t ag_bytes = 4000;  // 4 s with UnitCost
  double compute_s = 3;
};

// FSDP2's protocol for one rank (forward with all-gathers, backward with reduce-scatters,
// optimizer), with every wait it needs and nothing more:
//   copy-in stream alloc -> AG stream waits -> AG -> compute waits AG event -> copy-out ->
//   AG stream (pool of the AG output) waits compute event -> free.
// `needed` (optional) receives the waits whose removal must be reported.
inline Program fsdp_program(int rank, const FsdpShape& shape,
                            std::vector<NeededWait>* needed = nullptr) {
  ProgramBuilder b(rank);
  uint64_t next_event = 1;
  uint64_t next_buffer = 1000;
  auto wait = [&](S stream, uint64_t event, bool need, ProblemKind kind) {
    if (need && needed) needed->push_back({b.size(), kind});
    b.wait(stream, event);
  };
  const auto L = static_cast<size_t>(shape.layers);
  std::vector<uint64_t> shard(L);
  for (size_t l = 0; l < L; ++l) {
    shard[l] = next_buffer++;
    b.alloc(shard[l], S::kDefault, "layers." + std::to_string(l) + " sharded params");
  }
  const uint64_t input = next_buffer++;
  b.alloc(input, S::kDefault, "input");
  for (int step = 0; step < shape.steps; ++step) {
    b.at_step(step).marker("step " + std::to_string(step));
    // The optimizer of the previous step wrote the shards on the compute stream.
    const uint64_t step_ev = next_event++;
    b.record(S::kDefault, step_ev);
    wait(S::kAllGatherCopyIn, step_ev, step > 0 && !shape.sync_each_step, ProblemKind::kStreamRace);

    struct Gathered {
      uint64_t out = 0;
      uint64_t event = 0;
    };
    auto all_gather = [&](size_t l, const std::string& phase) {
      const std::string name = "layers." + std::to_string(l);
      const uint64_t in = next_buffer++, out = next_buffer++;
      b.alloc(in, S::kAllGatherCopyIn, name + " all_gather input");
      b.kernel(S::kAllGatherCopyIn, name + " copy_in", {shard[l]}, {in}, 1);
      const uint64_t ci_ev = next_event++;
      b.record(S::kAllGatherCopyIn, ci_ev);
      wait(S::kAllGather, ci_ev, true, ProblemKind::kStreamRace);
      b.alloc(out, S::kAllGather, name + " all_gather output");
      b.collective(S::kAllGather, name + " " + phase + " all_gather", CollectiveKind::kAllGather,
                   shape.group, shape.ag_bytes, {in}, {out});
      const uint64_t ag_ev = next_event++;
      b.record(S::kAllGather, ag_ev);
      wait(S::kAllGatherCopyIn, ag_ev, true, ProblemKind::kFreeWhileInUse);
      b.free(in);
      return Gathered{out, ag_ev};
    };
    // Copy-out into unsharded params on the compute stream, then release the AG output.
    auto copy_out = [&](size_t l, const Gathered& g) {
      const std::string name = "layers." + std::to_string(l);
      wait(S::kDefault, g.event, true, ProblemKind::kStreamRace);
      const uint64_t params = next_buffer++;
      b.alloc(params, S::kDefault, name + " unsharded params");
      b.kernel(S::kDefault, name + " copy_out", {g.out}, {params}, 1);
      const uint64_t co_ev = next_event++;
      b.record(S::kDefault, co_ev);
      wait(S::kAllGather, co_ev, true, ProblemKind::kFreeWhileInUse);
      b.free(g.out);
      return params;
    };

    // Forward.
    std::vector<uint64_t> acts(L + 1);
    acts[0] = input;
    Gathered next = all_gather(0, "forward");
    for (size_t l = 0; l < L; ++l) {
      const Gathered cur = next;
      if (shape.prefetch && l + 1 < L) next = all_gather(l + 1, "forward");
      const uint64_t params = copy_out(l, cur);
      acts[l + 1] = next_buffer++;
      b.alloc(acts[l + 1], S::kDefault, "layers." + std::to_string(l) + " activation");
      b.kernel(S::kDefault, "layers." + std::to_string(l) + ".forward", {params, acts[l]},
               {acts[l + 1]}, shape.compute_s);
      b.free(params);
      if (!shape.prefetch && l + 1 < L) next = all_gather(l + 1, "forward");
    }
    // Backward and reduce-scatter; the optimizer runs on the compute stream.
    std::vector<uint64_t> grad_shards(L);
    std::vector<uint64_t> rs_events(L);
    for (size_t i = 0; i < L; ++i) {
      const size_t l = L - 1 - i;
      const std::string name = "layers." + std::to_string(l);
      const uint64_t params = copy_out(l, all_gather(l, "backward"));
      const uint64_t grad = next_buffer++;
      b.alloc(grad, S::kDefault, name + " unsharded grad");
      b.kernel(S::kDefault, name + ".backward", {params, acts[l], acts[l + 1]}, {grad},
               2 * shape.compute_s);
      b.free(params);
      if (l > 0) b.free(acts[l + 1]);
      const uint64_t g_ev = next_event++;
      b.record(S::kDefault, g_ev);
      wait(S::kReduceScatter, g_ev, true, ProblemKind::kStreamRace);
      grad_shards[l] = next_buffer++;
      b.alloc(grad_shards[l], S::kReduceScatter, name + " sharded grad");
      b.collective(S::kReduceScatter, name + " reduce_scatter", CollectiveKind::kReduceScatter,
                   shape.group, shape.ag_bytes, {grad}, {grad_shards[l]});
      rs_events[l] = next_event++;
      b.record(S::kReduceScatter, rs_events[l]);
      // The unsharded grad lives in the compute pool and the RS stream read it.
      wait(S::kDefault, rs_events[l], true, ProblemKind::kFreeWhileInUse);
      b.free(grad);
    }
    b.free(acts[1]);
    // Optimizer: reads the sharded grads (already ordered by the waits above), writes shards.
    for (size_t l = 0; l < L; ++l) {
      b.kernel(S::kDefault, "layers." + std::to_string(l) + " adamw", {grad_shards[l]}, {shard[l]},
               1);
    }
    const uint64_t opt_ev = next_event++;
    b.record(S::kDefault, opt_ev);
    wait(S::kReduceScatter, opt_ev, true, ProblemKind::kFreeWhileInUse);
    for (size_t l = 0; l < L; ++l) b.free(grad_shards[l]);
    if (shape.sync_each_step) b.sync(0);
  }
  return b.build();
}

inline std::vector<GroupInfo> one_group(int world) {
  GroupInfo g;
  g.name = "shard";
  for (int r = 0; r < world; ++r) g.ranks.push_back(r);
  return {g};
}

}  // namespace fullshard::sim::testing
