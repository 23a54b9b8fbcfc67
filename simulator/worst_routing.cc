#include "simulator/worst_routing.h"

#include "simulator/simulate.h"

namespace fullshard::sim {

bool routing_moves_memory(const Scenario& s) {
  const MoeConfig& m = s.model.moe;
  return m.enabled() && s.expert_parallel.degree > 1 &&
         (!m.expert_load.empty() || m.hot_expert_factor < static_cast<double>(m.num_experts));
}

Scenario with_worst_routing(const Scenario& s) {
  Scenario w = s;
  w.model.moe.hot_expert_factor = static_cast<double>(w.model.moe.num_experts);
  w.model.moe.expert_load.clear();
  w.training.moe_routing_record = nullptr;  // the assumption, not a run's record
  return w;
}

std::optional<WorstRoutingReport> simulate_worst_routing(const Scenario& s) {
  if (!routing_moves_memory(s)) return std::nullopt;
  SimulateOptions o;
  o.checks = false;
  o.memory_timeline = false;
  o.play_checkpoint = false;
  const Scenario w = with_worst_routing(s);
  const SimulationReport r = simulate_scenario(w, o);
  WorstRoutingReport out;
  out.hot_expert_factor = w.model.moe.hot_expert_factor;
  out.out_of_memory = r.out_of_memory;
  for (const RankClassReport& c : r.classes) {
    if (c.peak_reserved_bytes > out.peak_reserved_bytes) {
      out.peak_reserved_bytes = c.peak_reserved_bytes;
      out.peak_rank = c.representative;
    }
    if (c.peak_allocated_bytes > out.peak_allocated_bytes)
      out.peak_allocated_bytes = c.peak_allocated_bytes;
  }
  return out;
}

}  // namespace fullshard::sim
