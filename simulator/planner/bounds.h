#pragma once
// Lower bounds on a candidate's peak memory and step time, from a 2-block proxy simulation.
//
// NOTE [Block bounds]: the transformer's blocks are identical, so the program of an L-block
// model is the 2-block program with L - 2 more copies of a block's work in the middle. The
// planner simulates the candidate with n_layers = 2 (a "proxy": both blocks in one
// checkpointing mode, expandable segments, unlimited capacity) and attributes every buffer,
// kernel and collective to block 0, block 1 or the rest ("root": embedding, norm, output,
// loss, batch) by its name ("layers.0.attention.wq", "layers.1 all_gather", "output"). Then,
// for the full model (blocks 0..L-2 behave like proxy block 0, the last like proxy block 1,
// each with its own checkpointing mode):
//  - Time: every stream runs its ops one after another, and every op of the last step starts
//    after the previous step ended and ends before this one does, so the step time is at least
//    any one stream's summed op costs in that step: root + sum over blocks of the block's.
//    The engine only ever slows ops (NOTE [Rates] in engine.cc; a planner scenario has no
//    faster ranks), so the cost model's seconds are lower bounds on each op's duration.
//    Kernels over every parameter at once (the foreach AdamW step, clipping's foreach kernels)
//    have FLOPs and bytes proportional to the rank's local shard elements; the proxy's kernel
//    with its FLOPs and bytes scaled to the full model's elements *is* the full model's
//    kernel, and the cost model prices it. The host also pays the launch overhead for every
//    op of the step, one after another, so the step takes at least (ops x launch overhead).
//    And while a collective runs, device kernels progress at most at (1 - its compute
//    slowdown): with W the compute stream's device-kernel seconds and B the busy time of one
//    communication stream whose collectives slow compute by at least s, the step covers the
//    device kernels' busy time plus the stream's time outside it, which is at least
//    W - (1 - s) x overlap + B >= W + s x B >= W + s x (its summed costs).
//  - Memory: at any moment between the last block's forward and its backward (the loss and
//    its backward, all root work) every block holds what proxy block 0 holds then (its saved
//    activations, its output, its shards, optimizer state, kept unsharded parameters or
//    accumulated gradients) and the last block what proxy block 1 holds; the root holds what
//    it holds in the proxy. At the optimizer step every block holds its shards, gradients and
//    optimizer state. Sizes are requests rounded to 512 B (an expandable-segments recording),
//    which no allocator setting hands out smaller, so the sums bound the peak allocated bytes
//    and hence the peak reserved bytes of every allocator setting.
// Each rank class of the proxy is a set of real ranks whose block and root shards are the ones
// the full model gives them, so each class's bound holds for those ranks; the candidate's
// bound is the largest. tests/unit/planner_bounds_test.cc checks bound <= simulated value for
// every candidate of small spaces, and planner_prune_test.cc that pruning keeps the winner.
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/model/transformer.h"
#include "core/runtime/stream.h"
#include "core/scenario/scenario.h"

namespace fullshard::planner {

// What one proxy (2 blocks, both in one mode) says about one rank class.
struct ClassProfile {
  // Summed cost-model seconds of the last step's ops per stream, root, block 0, block 1; the
  // last slot is the host's launch overheads. The root's include the aggregate kernels priced
  // at the full model's size.
  static constexpr int kHost = kNumStreams;
  std::array<double, kNumStreams + 1> root_s{}, block0_s{}, block1_s{};
  double root_device = 0, block0_device = 0,
         block1_device = 0;  // device kernels on the compute stream
  std::array<double, kNumStreams>
      slowdown;  // smallest compute slowdown of a stream's collectives (1: none)
  ClassProfile() { slowdown.fill(1.0); }
  // Live device bytes (requests rounded to 512 B) between the last block's forward and its
  // backward: the root's largest, and each block's (constant there).
  uint64_t window_root = 0, window_block0 = 0, window_block1 = 0;
  // Live device bytes when the last optimizer step begins.
  uint64_t opt_root = 0, opt_block0 = 0, opt_block1 = 0;
};

struct ProxyProfile {
  std::vector<ClassProfile> classes;  // the proxy's rank classes, in simulate_scenario order
};

// Simulates `s` with 2 blocks in checkpointing `mode` (expandable segments, unlimited
// capacity, no checks) and measures it. `s` must have at least 2 blocks.
// `full_rows`, `proxy_rows`: param_rows of s.model and of s.model with 2 blocks when the
// caller has them (the planner builds them once per model); nullptr: built here.
using ParamRows = std::vector<std::pair<int64_t, int64_t>>;
ProxyProfile profile_proxy(const Scenario& s, BlockCheckpoint mode,
                           const ParamRows* full_rows = nullptr,
                           const ParamRows* proxy_rows = nullptr);

// Each parameter's rows and elements per row, in the model's order.
ParamRows param_rows(const ModelConfig& m);

struct Bounds {
  double step_time_s = 0;   // lower bound on the step time
  uint64_t peak_bytes = 0;  // lower bound on peak allocated (and reserved) bytes per GPU
};

// The bound for `n_layers` blocks checkpointed as `blocks` (block_checkpointing()), from the
// proxies of the modes it uses (indexed by BlockCheckpoint; the unused may be empty).
Bounds combine_bounds(const std::array<const ProxyProfile*, 3>& proxies,
                      const std::vector<BlockCheckpoint>& blocks);

// Owner of a buffer or op by name: 0 or 1 for "layers.0..." / "layers.1...", -1 for the root.
int block_of(std::string_view name);

}  // namespace fullshard::planner
