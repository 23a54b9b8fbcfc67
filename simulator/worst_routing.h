#pragma once
// The peak under the worst routing a mixture-of-experts scenario allows, for capacity planning
// beside the peak under the routing the scenario assumes (docs/moe.md, "Routing").
//
// NOTE [Worst-case routing]: with ep > 1 the all-to-all's output, and every buffer after it, is
// as large as what a rank receives, so routing moves memory (NOTE [Expert-parallel routing] in
// core/model/moe_routing.h); with ep = 1 every MoE buffer has a static shape and routing moves
// only FLOPs. The worst a batch can do is route every token of every rank to the same top_k
// experts 0 .. top_k - 1: ep rank 0 then receives ep x tokens x min(top_k, experts / ep) rows,
// the most any rank can (max_receive_rows, the "max" receive buffers' size), and no rank's
// peak under any routing is higher. That is training.moe_routing "worst", hot_expert_factor at
// its limit num_experts (skewed_tokens_per_expert; with top_k 1, every token to one expert).
// simulate_worst_routing plays the scenario under it.
#include <cstdint>
#include <optional>

#include "core/scenario/scenario.h"

namespace fullshard::sim {

struct WorstRoutingReport {
  double hot_expert_factor = 0;       // the routing played (num_experts)
  uint64_t peak_allocated_bytes = 0;  // the largest over rank classes
  uint64_t peak_reserved_bytes = 0;
  int peak_rank = 0;  // a representative of the class with the largest reserved peak
  bool out_of_memory = false;
};

// Whether routing can move `s`'s memory and `s` does not already assume the worst: a MoE model
// with ep > 1 and training.moe_routing below the limit.
bool routing_moves_memory(const Scenario& s);

// The scenario with its routing set to the worst (NOTE [Worst-case routing]).
Scenario with_worst_routing(const Scenario& s);

// Plays `s` under the worst routing (no protocol checks, no timeline); nullopt when
// routing_moves_memory(s) is false.
std::optional<WorstRoutingReport> simulate_worst_routing(const Scenario& s);

}  // namespace fullshard::sim
