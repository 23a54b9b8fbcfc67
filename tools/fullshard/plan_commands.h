#pragma once
// `fullshard plan`: the capacity planner's command line (docs/planner.md).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace fullshard::cli {

struct PlanFlags {
  std::string model, hf_config, scenario;  // exactly one
  std::optional<int> gpus, gpus_per_node;
  std::string gpu;
  std::optional<int64_t> seq_len, global_batch;
  std::vector<int64_t> micro_batches;  // without --global-batch (default 1, 2, 4, 8)
  std::vector<int> tp;  // tensor-parallel degrees; empty: every one the model and node allow
  // Expert-parallel degrees (MoE models); empty: the scenario's degree when it sets one, else
  // planner::ep_degrees().
  std::vector<int> ep;
  // Pipeline-parallel degrees (need --global-batch) and schedules (default 1F1B and
  // Interleaved1F1B).
  std::vector<int> pp;
  // training.moe_routing for every candidate ("balanced", "worst"): rank by the worst-case peak.
  std::string moe_routing;
  std::vector<std::string> pp_schedules;
  // Context-parallel degrees and rotate methods (default allgather; docs/context-parallel.md).
  std::vector<int> cp;
  std::vector<std::string> cp_rotates;
  double headroom = 0.05;
  std::string json_out, write_scenario;
  int64_t top = 10;
  bool exhaustive = false;
  bool float8 = false;  // search training.float8 too (GPUs with float8 rates only)
  // --finetune lora | qlora: torchtune's LoRA / QLoRA recipe on the base model (NOTE
  // [Fine-tuning presets] in plan_commands.cc); empty: none.
  std::string finetune;
  int threads = 0;
  // A checkpoint every N steps (training.checkpoint, NOTE [Checkpoint cost]): its amortised
  // cost is part of every candidate's step time.
  std::optional<int> checkpoint_every;
  std::string checkpoint_mode;  // sync (default) or async (parse_checkpoint_save_mode)
  std::optional<double> storage_write_bandwidth;  // bytes/s per node
};

// Adds the `plan` subcommand and its flags to `app`, bound to `flags`.
CLI::App* add_plan_command(CLI::App& app, PlanFlags& flags);

// fullshard plan --model NAME|--hf-config config.json|--scenario S.json --gpus N
//   --gpus-per-node G --gpu PROFILE --seq-len L [--global-batch B] [--headroom F]
//   [--json OUT.json] [--write-scenario BEST.json] [--top K] [--exhaustive]
// Exit codes: 0 something fits; 3 nothing fits; bad input throws InputError (exit 2).
int cmd_plan(const PlanFlags& flags);

}  // namespace fullshard::cli
