#pragma once
// Pipeline-parallel scenarios for simulator tests: tiny-llama (n_layers overridable) on a
// [pp, dp_shard] mesh of H100s, and what one simulation of it shows per pp rank.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"
#include "simulator/simulate.h"

namespace fullshard::testing {

struct PipelineCase {
  std::string schedule = "1F1B";
  int pp = 2;
  int shard = 2;
  int layers = 2;
  int microbatches = 4;
  int microbatch_size = 1;
  int seq = 32;
  int steps = 2;
  nlohmann::json split = nullptr;  // module_fqns_per_model_part when not null
};

inline nlohmann::json pipeline_scenario_json(const PipelineCase& c) {
  nlohmann::json pp = {{"schedule", c.schedule}, {"microbatch_size", c.microbatch_size}};
  if (!c.split.is_null()) pp["module_fqns_per_model_part"] = c.split;
  return {{"name", "pipeline-test"},
          {"model", {{"name", "tiny-llama"}, {"n_layers", c.layers}}},
          {"training",
           {{"batch_per_rank", c.microbatches * c.microbatch_size},
            {"seq_len", c.seq},
            {"steps", c.steps},
            {"optimizer", {{"max_grad_norm", 1.0}}}}},
          {"fsdp",
           {{"mesh", {{"shape", {c.pp, c.shard}}, {"dim_names", {"pp", "dp_shard"}}}},
            {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}}},
          {"pipeline_parallel", pp},
          {"hardware", {{"profile", "h100"}, {"nodes", 1}, {"gpus_per_node", c.pp * c.shard}}}};
}

struct PipelineRun {
  sim::SimulationReport report;
  // Per pp index (its first rank class): peak allocated bytes, and the last step's transfers
  // by channel kind ("F send", "F recv", "B send", "B recv") and collective counts by kind.
  std::vector<uint64_t> peak;
  std::vector<std::map<std::string, int>> transfers;
  std::vector<std::map<CollectiveKind, int>> collectives;
};

inline PipelineRun simulate_pipeline(const Scenario& s) {
  PipelineRun run;
  const int pp = s.pipeline.degree, per_pp = s.world_size() / pp;
  run.peak.assign(static_cast<size_t>(pp), 0);
  run.transfers.resize(static_cast<size_t>(pp));
  run.collectives.resize(static_cast<size_t>(pp));
  std::vector<bool> seen(static_cast<size_t>(pp), false);
  sim::SimulateOptions o;
  o.simulated_steps = s.training.steps;
  o.on_played = [&](const sim::PlayedRun& played) {
    for (size_t i = 0; i < played.programs.size(); ++i) {
      const sim::Program& prog = played.programs[i];
      const size_t k = static_cast<size_t>(prog.rank / per_pp);
      if (seen[k]) continue;
      seen[k] = true;
      const int last = prog.instrs.back().step;
      for (const auto& in : prog.instrs) {
        if (in.type != sim::InstrType::kCollective || in.step != last) continue;
        ++run.collectives[k][in.coll];
        const sim::GroupInfo& g = played.groups[in.group];
        if (g.name.rfind("pipeline p2p", 0) != 0) continue;
        const std::string kind(1, g.name[13]);
        run.transfers[k][kind + (g.ranks[0] == prog.rank ? " send" : " recv")]++;
      }
    }
  };
  run.report = sim::simulate_scenario(s, o);
  for (const auto& c : run.report.classes) {
    const size_t k = static_cast<size_t>(c.ranks.front() / per_pp);
    if (run.peak[k] == 0) run.peak[k] = c.peak_allocated_bytes;
  }
  return run;
}

}  // namespace fullshard::testing
