#pragma once
// Shared helpers for simulator tests: small scenarios built as JSON (so the parser is part of
// every test) and the simulation run.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"
#include "simulator/simulate.h"

namespace fullshard::testing {

struct TinyOptions {
  std::string model = "tiny-llama";
  std::vector<int> mesh = {2};
  nlohmann::json reshard_after_forward = nullptr;  // null: the default
  nlohmann::json per_unit = nullptr;               // fsdp.per_unit when not null
  nlohmann::json mixed_precision = nlohmann::json::object();
  bool cpu_offload = false;
  nlohmann::json activation_checkpointing = "none";
  int grad_accum_steps = 1;
  int steps = 2;
  int batch = 2;
  int seq = 32;
  std::string units = "blocks";
  int forward_prefetch = 0;
  int backward_prefetch = 1;
  double max_grad_norm = 1.0;
  nlohmann::json hardware_extra = nlohmann::json::object();
};

inline nlohmann::json tiny_scenario_json(const TinyOptions& o) {
  int world = 1;
  for (int d : o.mesh) world *= d;
  nlohmann::json fsdp = {{"mesh", {{"shape", o.mesh}}},
                         {"mixed_precision", o.mixed_precision},
                         {"cpu_offload", o.cpu_offload},
                         {"units", o.units},
                         {"forward_prefetch", o.forward_prefetch},
                         {"backward_prefetch", o.backward_prefetch}};
  if (!o.reshard_after_forward.is_null()) fsdp["reshard_after_forward"] = o.reshard_after_forward;
  if (!o.per_unit.is_null()) fsdp["per_unit"] = o.per_unit;
  nlohmann::json hw = {{"profile", "cpu"}, {"nodes", 1}, {"gpus_per_node", world}};
  for (auto& [k, v] : o.hardware_extra.items()) hw[k] = v;
  return {{"name", "test"},
          {"model", o.model},
          {"training",
           {{"batch_per_rank", o.batch},
            {"seq_len", o.seq},
            {"steps", o.steps},
            {"grad_accum_steps", o.grad_accum_steps},
            {"activation_checkpointing", o.activation_checkpointing},
            {"optimizer", {{"max_grad_norm", o.max_grad_norm}}}}},
          {"fsdp", fsdp},
          {"hardware", hw}};
}

inline Scenario tiny_scenario(const TinyOptions& o) {
  return parse_scenario(tiny_scenario_json(o));
}

inline std::string problems_text(const sim::SimulationReport& r) {
  std::string s;
  for (const auto& p : r.problems) s += p.message + "\n";
  return s;
}

// The collectives one training step of a tensor-parallel run issues, by process group, and the
// report: `model` (2 blocks) on mesh [shard, tp], batch 1 x seq 16, program 0's last step.
struct TpStepCollectives {
  std::map<std::string, std::map<CollectiveKind, int>> by_group;  // group name -> kind -> count
  sim::SimulationReport report;
};

inline TpStepCollectives tp_step_collectives(const std::string& model, int shard, int tp,
                                             bool loss_parallel,
                                             const std::string& activation_checkpointing) {
  const nlohmann::json j = {
      {"name", "t"},
      {"model", model},
      {"training",
       {{"batch_per_rank", 1},
        {"seq_len", 16},
        {"steps", 2},
        {"activation_checkpointing", activation_checkpointing}}},
      {"fsdp", {{"mesh", {{"shape", {shard, tp}}, {"dim_names", {"dp_shard", "tp"}}}}}},
      {"tensor_parallel", {{"loss_parallel", loss_parallel}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", shard * tp}}}};
  TpStepCollectives c;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs)
      if (in.type == sim::InstrType::kCollective && in.step == last)
        ++c.by_group[run.groups[in.group].name][in.coll];
  };
  c.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(c.report.ok()) << problems_text(c.report);
  return c;
}

}  // namespace fullshard::testing
