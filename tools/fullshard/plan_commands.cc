#include "tools/fullshard/plan_commands.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>

#include <unistd.h>

#include "core/common/error.h"
#include "core/common/json_file.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "core/scenario/hardware_profile.h"
#include "core/model/tensor_parallel.h"
#include "core/scenario/json_reader.h"
#include "core/scenario/pipeline_resolve.h"
#include "core/scenario/scenario.h"
#include "simulator/planner/candidate_json.h"
#include "simulator/planner/plan_report.h"
#include "simulator/sim_limits.h"
#include "simulator/planner/planner.h"
#include "tools/fullshard/plot_commands.h"

namespace fullshard::cli {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kMaxThreads = 1024;
// The planner simulates its candidates: at most the simulator's world (simulator/sim_limits.h).
constexpr int kMaxPlanGpus = static_cast<int>(sim::kMaxSimulatedWorld);

CLI::App* add_plan_command(CLI::App& app, PlanFlags& f) {
  auto* p = app.add_subcommand(
      "plan",
      "which sharding, precision and checkpointing settings fit on N GPUs, and which is fastest");
  p->add_option("--model", f.model, "model zoo name (see `fullshard models`)");
  p->add_option("--hf-config", f.hf_config,
                "a Hugging Face config.json (Llama, Mistral, Qwen2, GPT-2)");
  p->add_option("--scenario", f.scenario,
                "start from a scenario file (model, hardware, optimizer, ...)");
  p->add_option("--gpus", f.gpus, "number of GPUs (ranks)");
  p->add_option("--gpus-per-node", f.gpus_per_node, "GPUs per node (default: the profile's)");
  p->add_option("--gpu", f.gpu, "hardware profile, e.g. h100-sxm-80gb (scenarios/hardware/)");
  p->add_option("--seq-len", f.seq_len, "tokens per sequence");
  p->add_option("--global-batch", f.global_batch,
                "sequences per optimizer step over all GPUs (default: free)");
  p->add_option("--micro-batches", f.micro_batches,
                "micro-batch sizes to try without --global-batch (default 1 2 4 8)");
  p->add_option("--tp", f.tp,
                "tensor-parallel degrees to try (default: each of 1 2 4 8 that fits in a node and "
                "splits the model; --tp 1: none)");
  p->add_option("--ep", f.ep,
                "expert-parallel degrees to try, mixture-of-experts models only (default: the "
                "scenario's, else each of 1 2 4 8 that fits in a node and divides the experts)");
  p->add_option("--pp", f.pp,
                "pipeline-parallel degrees to try, with --global-batch (default 1: none; "
                "docs/pipeline.md)");
  p->add_option("--pp-schedule", f.pp_schedules,
                "pipeline schedules to try with --pp (default 1F1B Interleaved1F1B; also GPipe, "
                "LoopedBFS)");
  p->add_option("--cp", f.cp,
                "context-parallel degrees to try (default 1: none; each sequence split over cp "
                "ranks with ring attention, docs/context-parallel.md)");
  p->add_option("--cp-rotate", f.cp_rotates,
                "ring attention's K / V exchange to try with --cp: allgather (default) and / or "
                "alltoall");
  p->add_option("--moe-routing", f.moe_routing,
                "mixture-of-experts models: the routing every candidate is simulated under, "
                "balanced (default), worst (every token to the same top-k experts: fits under "
                "any routing) or a training.moe_routing object such as "
                "'{\"expert_load\": \"run.jsonl\"}' (a recorded run's expert shares, which carry "
                "to every candidate's mesh; docs/moe.md)");
  p->add_option("--headroom", f.headroom,
                "fraction of the allocator's memory to keep free (default 0.05; 0: fits means what "
                "`fullshard simulate` says)");
  p->add_option("--json", f.json_out, "write every configuration, in rank order, here (JSON)");
  p->add_option("--write-scenario", f.write_scenario,
                "write the recommended configuration as a scenario file here");
  p->add_option("--top", f.top, "rows of the ranked table to print (default 10)");
  p->add_flag("--exhaustive", f.exhaustive,
              "simulate every configuration (no pruning by lower bounds)");
  p->add_flag("--float8", f.float8,
              "also try torchao float8 training: tensorwise, tensorwise with FSDP2's float8 "
              "all-gather, rowwise, rowwise_with_gw_hp (docs/float8.md)");
  p->add_option("--finetune", f.finetune,
                "fine-tuning preset: lora (torchtune llama3_1/8B_lora: rank-8 adapters on q_proj "
                "and v_proj, base frozen in bf16) or qlora (8B_qlora: rank 16 on every attention "
                "and MLP linear, NF4 base) (docs/planner.md)");
  p->add_option("--checkpoint-every", f.checkpoint_every,
                "add the amortised cost of a distributed checkpoint every N steps to each step "
                "time (docs/checkpoints.md)");
  p->add_option("--checkpoint-mode", f.checkpoint_mode,
                "with --checkpoint-every: sync (default) or async");
  p->add_option("--storage-write-bandwidth", f.storage_write_bandwidth,
                "with --checkpoint-every: bytes/s one node writes to the checkpoint storage "
                "(default 2e9, an assumption)");
  p->add_option("--threads", f.threads, "simulation threads (default: one per hardware thread)");
  return p;
}

namespace {

// NOTE [Plan flag errors]: the base scenario is built as JSON and parsed by parse_scenario,
// so its errors name JSON paths; for the flags the user typed, they are renamed to the flag.
[[noreturn]] void rethrow_for_flags(const InputError& e, const PlanFlags& f) {
  std::string where = e.where();
  std::string what = e.what();
  auto rename = [&](const std::string& prefix, const std::string& flag) {
    if (where.rfind(prefix, 0) != 0) return false;
    const std::string rest = what.substr(std::min(what.size(), where.size()));
    throw InputError(flag, rest.rfind(": ", 0) == 0 ? rest.substr(2) : rest, "");
  };
  if (!f.finetune.empty()) {  // the preset's own fields (NOTE [Fine-tuning presets])
    rename("model.lora", "--finetune");
    rename("training.frozen_dtype", "--finetune");
    rename("training.nf4", "--finetune");
  }
  if (f.scenario.empty()) {
    rename("model", f.hf_config.empty() ? "--model" : "--hf-config");
    rename("training.seq_len", "--seq-len");
  }
  if (!f.gpu.empty()) rename("hardware.profile", "--gpu");
  if (!f.moe_routing.empty()) rename("training.moe_routing", "--moe-routing");
  if (f.checkpoint_every) {
    rename("training.checkpoint.every", "--checkpoint-every");
    rename("training.checkpoint.mode", "--checkpoint-mode");
    rename("training.checkpoint.storage_write_bandwidth", "--storage-write-bandwidth");
  }
  throw e;
}

// NOTE [Fine-tuning presets]: `--finetune` adds torchtune's recipe to the base model, as its
// configs give it (pytorch/torchtune recipes/configs/llama3_1/): "lora" is 8B_lora.yaml
// (@0031bfb0, lora_finetune_distributed: lora_rank 8, lora_alpha 16, lora_attn_modules q_proj and
// v_proj, no MLP or output adapters), "qlora" is 8B_qlora.yaml (@a930f88d, the multi-device
// 8B config, whose header text is 405B_qlora.yaml's: rank 16, alpha 32, q, k, v and output_proj
// plus the MLP, the base's block linears as NF4). Both set `dtype: bf16` and torchtune's
// shard_model passes no MixedPrecisionPolicy: every parameter, adapters included, is stored in
// bf16 (training.orig_dtype "bf16"; the planner's fp32 candidate is exactly that, its bf16 ones
// add a policy). The base stays frozen (NF4 for qlora, torchao's block sizes); candidates the
// frozen base or NF4 does not run with (tp, pp, cp; for NF4 HSDP, offload, an int reshard) are
// left out as for a --scenario that sets them (docs/planner.md). A scenario that already sets
// model.lora or training.frozen is refused: the preset would replace what it says.
void apply_finetune_preset(json& j, const PlanFlags& f) {
  if (f.finetune.empty()) return;
  if (f.finetune != "lora" && f.finetune != "qlora")
    throw InputError("--finetune", "is '" + f.finetune + "'", "give lora or qlora");
  json& t = j["training"];
  const bool has_lora = j["model"].is_object() && j["model"].contains("lora");
  if (has_lora || (t.is_object() && (t.contains("frozen") || t.contains("frozen_dtype"))))
    throw InputError("--finetune",
                     "is given but the scenario sets " +
                         std::string(has_lora ? "model.lora" : "training.frozen / frozen_dtype"),
                     "drop --finetune to plan the scenario's own fine-tuning, or remove it");
  if (j["model"].is_string()) j["model"] = {{"name", j["model"]}};
  // torchtune's `dtype: bf16`: parameters stored in bf16, no mixed-precision policy.
  if (!t.is_object()) t = json::object();
  if (!t.contains("orig_dtype")) t["orig_dtype"] = "bf16";
  if (f.finetune == "lora") {
    j["model"]["lora"] = {{"rank", 8}, {"alpha", 16}, {"target_modules", {"q_proj", "v_proj"}}};
  } else {
    j["model"]["lora"] = {{"rank", 16},
                          {"alpha", 32},
                          {"target_modules", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                              "up_proj", "down_proj"}}};
    t["frozen_dtype"] = "nf4";
  }
}

json base_json(const PlanFlags& f, HardwareProfile& profile) {
  const int given =
      (f.model.empty() ? 0 : 1) + (f.hf_config.empty() ? 0 : 1) + (f.scenario.empty() ? 0 : 1);
  if (given != 1)
    throw InputError(
        given == 0 ? "--model" : "--scenario",
        given == 0 ? "no model given" : "several model sources given",
        "give exactly one of --model NAME (see `fullshard models`), --hf-config config.json or "
        "--scenario S.json");
  json j;
  if (!f.scenario.empty()) {
    j = json_reader::read_json_file(f.scenario);
    if (!j.is_object())
      throw InputError("--scenario", "'" + f.scenario + "' is not a JSON object",
                       "give a scenario file");
    const fs::path dir = fs::path(f.scenario).parent_path();
    j = planner::absolutize_paths(j, dir.empty() ? "." : dir.string());
    if (!j.contains("name")) j["name"] = fs::path(f.scenario).stem().string();
    if (j.contains("training") && j["training"].is_object() && j["training"].contains("rank_batch"))
      throw InputError("--scenario",
                       "'" + f.scenario + "' sets training.rank_batch (an uneven batch)",
                       "remove it: the planner gives every GPU the same micro-batch");
    if (j.contains("pipeline_parallel"))  // the planner chooses pp (--pp)
      throw InputError("--scenario", "'" + f.scenario + "' sets pipeline_parallel",
                       "remove it and the pp dim, and give --pp: the planner chooses them");
    if (j.contains("context_parallel"))  // the planner chooses cp (--cp)
      throw InputError("--scenario", "'" + f.scenario + "' sets context_parallel",
                       "remove it and the cp dim, and give --cp: the planner chooses them");
    // The planner chooses these; a mesh or reshard int for another world would not parse.
    if (j.contains("fsdp") && j["fsdp"].is_object()) {
      j["fsdp"].erase("mesh");
      j["fsdp"].erase("reshard_after_forward");
    }
  } else {
    if (!f.model.empty()) {
      j["model"] = f.model;
    } else {
      std::error_code ec;
      if (!fs::exists(f.hf_config, ec))
        throw InputError(
            "--hf-config", "file not found: '" + f.hf_config + "'",
            "give the path of a Hugging Face config.json or of the model directory holding one");
      j["model"] = {{"hf_config", fs::absolute(f.hf_config).lexically_normal().string()}};
    }
    j["name"] = "plan";
    j["training"] = {{"steps", 2}};
    j["hardware"] = json::object();
  }
  if (!j.contains("training") || !j["training"].is_object()) j["training"] = json::object();
  if (!j.contains("hardware") || !j["hardware"].is_object()) j["hardware"] = json::object();
  apply_finetune_preset(j, f);
  json& t = j["training"];
  json& h = j["hardware"];
  if (f.checkpoint_every) {
    t["checkpoint"] = {
        {"every", *f.checkpoint_every},
        {"mode", checkpoint_save_mode_name(
                     f.checkpoint_mode.empty()
                         ? CheckpointSaveMode::kSync
                         : parse_checkpoint_save_mode(f.checkpoint_mode, "--checkpoint-mode"))}};
    if (f.storage_write_bandwidth)
      t["checkpoint"]["storage_write_bandwidth"] = *f.storage_write_bandwidth;
  } else if (!f.checkpoint_mode.empty() || f.storage_write_bandwidth) {
    throw InputError(f.checkpoint_mode.empty() ? "--storage-write-bandwidth" : "--checkpoint-mode",
                     "is given without --checkpoint-every", "add --checkpoint-every N");
  }
  if (f.seq_len)
    t["seq_len"] = *f.seq_len;
  else if (!t.contains("seq_len"))
    throw InputError("--seq-len", "is missing",
                     "give the tokens per sequence, e.g. --seq-len 8192");
  if (!f.gpu.empty())
    h["profile"] = f.gpu;
  else if (!h.contains("profile"))
    throw InputError("--gpu", "is missing", "give a hardware profile, e.g. --gpu h100-sxm-80gb");
  if (!f.gpu.empty()) {
    profile = load_hardware_profile(f.gpu, "--gpu");
  } else {
    const std::string p = h["profile"].is_string() ? h["profile"].get<std::string>() : "";
    profile = p.size() > 5 && p.substr(p.size() - 5) == ".json"
                  ? load_hardware_profile_file(p)
                  : load_hardware_profile(p, "hardware.profile");
  }
  // A scenario's number as int64, clamped just past the limit so that the range checks
  // below report it (a plain get<int> would wrap 2^32 + 8 to 8).
  const auto scenario_int = [](const json& v, int64_t absent) -> int64_t {
    if (!v.is_number_integer()) return absent;
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{kMaxPlanGpus})
      return int64_t{kMaxPlanGpus} + 1;
    return std::clamp<int64_t>(v.get<int64_t>(), -int64_t{kMaxPlanGpus} - 1,
                               int64_t{kMaxPlanGpus} + 1);
  };
  const int gpn = static_cast<int>(
      f.gpus_per_node ? *f.gpus_per_node
                      : scenario_int(h.value("gpus_per_node", json()), profile.gpus_per_node));
  int64_t gpus;
  if (f.gpus) {
    gpus = *f.gpus;
  } else if (!f.scenario.empty()) {
    // The scenario's own figures: wide arithmetic, bounded below like the flag.
    gpus = std::clamp<int64_t>(int64_t{gpn} * scenario_int(h.value("nodes", json()), 1),
                               -int64_t{kMaxPlanGpus} - 1, int64_t{kMaxPlanGpus} + 1);
  } else {
    throw InputError("--gpus", "is missing", "give the number of GPUs, e.g. --gpus 256");
  }
  if (gpus < 1 || gpus > kMaxPlanGpus)
    throw InputError(
        "--gpus", fmt::format("is {}", gpus),
        fmt::format(
            "give the number of GPUs, between 1 and {} (the simulator's limit), e.g. --gpus 256",
            kMaxPlanGpus));
  if (gpn < 1 || gpn > kMaxPlanGpus)
    throw InputError(
        "--gpus-per-node", fmt::format("is {}", gpn),
        fmt::format("give the GPUs in one node, between 1 and {}, e.g. --gpus-per-node 8",
                    kMaxPlanGpus));
  if (f.gpus_per_node)
    check_gpus_per_node(profile, gpn, "--gpus-per-node");  // NOTE [Ranks per node]
  // Whole nodes, with the flag names (check_space_options has the same rule and message).
  planner::SpaceOptions probe;
  probe.gpus = static_cast<int>(gpus);
  probe.gpus_per_node = gpn;
  planner::check_space_options(probe);
  h["gpus_per_node"] = gpn;
  h["nodes"] = gpus / gpn;
  return j;
}

// A progress bar on stderr, drawn once the sweep has run for a second. When stderr is not a
// terminal (a log file), each phase gets one line when it ends instead of a redrawn bar.
class ProgressBar {
 public:
  void operator()(size_t done, size_t total, const char* phase) {
    std::lock_guard<std::mutex> l(mu_);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (phase_ != phase) {
      if (drawn_) std::fputc('\n', stderr);
      phase_ = phase;
      drawn_ = false;
      last_ = -1;
    }
    if (!tty_) {
      if (done == total && secs >= 1.0)
        std::fprintf(stderr, "  %s: %zu/%zu done at %.1f s\n", phase, done, total, secs);
      return;
    }
    if (secs < 1.0 || (secs - last_ < 0.1 && done != total)) return;
    last_ = secs;
    constexpr int kWidth = 30;
    const int fill = total ? static_cast<int>(kWidth * done / total) : kWidth;
    std::fprintf(stderr, "\r  %-8s [%s%s] %zu/%zu  %.1f s", phase,
                 std::string(static_cast<size_t>(fill), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - fill), '.').c_str(), done, total, secs);
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    std::lock_guard<std::mutex> l(mu_);
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::string phase_;
  double last_ = -1;
  bool drawn_ = false;
  bool tty_ = isatty(fileno(stderr)) != 0;
};

}  // namespace

int cmd_plan(const PlanFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  install_output_cleanup_on_signals();
  refuse_output_over_input("--json", f.json_out, {f.scenario, f.hf_config});
  refuse_output_over_input("--write-scenario", f.write_scenario,
                           {f.scenario, f.hf_config, f.json_out});
  if (!f.json_out.empty()) check_output_path("--json", f.json_out, {".json"});
  if (!f.write_scenario.empty()) check_output_path("--write-scenario", f.write_scenario, {".json"});
  if (!(f.headroom >= 0 && f.headroom < 1))
    throw InputError("--headroom", fmt::format("is {}", f.headroom),
                     "give the fraction of GPU memory to keep free, in [0, 1), e.g. 0.05");
  if (f.top < 1)
    throw InputError("--top", fmt::format("is {}", f.top),
                     "give the number of rows to print (>= 1), e.g. --top 10");
  if (f.threads < 0 || f.threads > kMaxThreads)
    throw InputError(
        "--threads", fmt::format("is {}", f.threads),
        fmt::format("give 0 (one per hardware thread) or a count between 1 and {}", kMaxThreads));
  HardwareProfile profile;
  json base = base_json(f, profile);
  // tensor_parallel.async needs a tp dim, which the planner chooses: the base parses without
  // it, and candidates with tp > 1 get it back (NOTE [What async TP needs] in scenario_checks.cc).
  bool async_tp = false;
  if (base.contains("tensor_parallel") && base["tensor_parallel"].is_object() &&
      base["tensor_parallel"].contains("async") && base["tensor_parallel"]["async"].is_boolean()) {
    async_tp = base["tensor_parallel"]["async"].get<bool>();
    base["tensor_parallel"]["async"] = false;
  }
  // A JSON object (e.g. {"expert_load": "run.jsonl"}, NOTE [Expert load]) or a name.
  if (!f.moe_routing.empty())
    base["training"]["moe_routing"] =
        f.moe_routing.front() == '{' ? parse_json_text(f.moe_routing, "--moe-routing")
                                     : json(f.moe_routing);
  planner::PlanOptions o;
  try {
    o.base = parse_scenario(base, ".");
  } catch (const InputError& e) {
    rethrow_for_flags(e, f);
  }
  o.base.tensor_parallel.async = async_tp;
  if (async_tp)
    base["tensor_parallel"]["async"] = true;  // --write-scenario keeps it (candidate_scenario_json)
  o.base.training.steps = 2;  // steady state: optimizer state exists from the first step on
  o.space.gpus = o.base.world_size();
  o.space.gpus_per_node = o.base.hardware.gpus_per_node;
  o.space.n_layers = o.base.model.n_layers;
  o.space.global_batch = f.global_batch;
  if (!f.micro_batches.empty()) o.space.micro_batches = f.micro_batches;
  if (f.tp.empty()) {
    o.space.tp_degrees =
        planner::tp_degrees(o.base.model, o.base.training.seq_len, o.space.gpus,
                            o.space.gpus_per_node, o.base.tensor_parallel.loss_parallel);
  } else {
    for (int tp : f.tp) {
      if (tp < 1 || o.space.gpus % tp != 0)
        throw InputError("--tp",
                         fmt::format("has {}, which does not divide --gpus {}", tp, o.space.gpus),
                         "give degrees that divide the GPU count, e.g. --tp 1 2 4 8");
      try {
        check_tensor_parallel(o.base.model, o.base.training.seq_len, tp,
                              o.base.tensor_parallel.loss_parallel);
      } catch (const InputError& e) {
        throw InputError("--tp",
                         fmt::format("has {}, which this model cannot use: {}", tp, e.what()),
                         "drop it from --tp");
      }
    }
    o.space.tp_degrees = f.tp;
  }
  // NOTE [Expert-parallel candidates]: for a mixture-of-experts model the planner searches ep
  // (carved out of the shard dim, check_expert_parallel); a scenario that sets
  // expert_parallel.degree keeps it unless --ep is given.
  if (!f.ep.empty()) {
    const MoeConfig& moe = o.base.model.moe;
    if (!moe.enabled())
      throw InputError("--ep", fmt::format("has {}, but the model has no experts", f.ep.front()),
                       "drop --ep, or plan a mixture-of-experts model (docs/moe.md)");
    for (int ep : f.ep)
      if (ep < 1 || moe.num_experts % ep != 0 || o.space.gpus % ep != 0)
        throw InputError("--ep",
                         fmt::format("has {}, which does not divide the {} experts and --gpus {}",
                                     ep, moe.num_experts, o.space.gpus),
                         "give degrees that divide both, e.g. --ep 1 2 4 8");
    o.space.ep_degrees = f.ep;
  } else if (o.base.expert_parallel.degree <= 1) {
    o.space.ep_degrees = planner::ep_degrees(o.base.model, o.space.gpus, o.space.gpus_per_node);
  }
  if (!f.pp.empty()) o.space.pp_degrees = f.pp;
  if (!f.pp_schedules.empty()) {
    if (f.pp.empty())
      throw InputError("--pp-schedule", "is given without --pp", "add --pp, e.g. --pp 2 4");
    o.space.pp_schedules.clear();
    for (const std::string& name : f.pp_schedules)
      o.space.pp_schedules.push_back(parse_pipeline_schedule(name, "--pp-schedule"));
  }
  // A model the pipeline cannot split (GPT-2, tied embeddings, the chunked loss, ...) is named
  // once here, rather than every pp candidate vanishing from the table.
  for (int pp : o.space.pp_degrees) {
    if (pp <= 1 || o.space.gpus % pp != 0 || !o.space.global_batch) continue;
    Scenario probe = o.base;
    probe.fsdp.mesh_shape = {pp, o.space.gpus / pp};
    probe.fsdp.mesh_dim_names = {"pp", "shard"};
    try {
      resolve_pipeline_parallel(probe, o.space.pp_schedules.front(), 1);
    } catch (const InputError& e) {
      const std::string w = e.where();
      if (w.rfind("model", 0) == 0 || w.rfind("training.checkpoint", 0) == 0)
        throw InputError("--pp",
                         fmt::format("has {}, which this scenario cannot use: {}", pp, e.what()),
                         "drop --pp");
    }
  }
  if (!f.cp.empty()) o.space.cp_degrees = f.cp;
  if (!f.cp_rotates.empty()) {
    if (f.cp.empty())
      throw InputError("--cp-rotate", "is given without --cp", "add --cp, e.g. --cp 2 4 8");
    o.space.cp_rotates.clear();
    for (const std::string& name : f.cp_rotates) {
      if (name != "allgather" && name != "alltoall")
        throw InputError("--cp-rotate", "has '" + name + "'", "give allgather and / or alltoall");
      o.space.cp_rotates.push_back(name == "alltoall" ? CpRotateMethod::kAllToAll
                                                      : CpRotateMethod::kAllGather);
    }
  }
  // A model context parallelism cannot run (GPT-2, experts, another SDPA backend) or a seq_len
  // no cp degree splits is named once here, rather than every cp candidate vanishing.
  for (int cp : o.space.cp_degrees) {
    if (cp <= 1 || o.space.gpus % cp != 0) continue;
    Scenario probe = o.base;
    probe.fsdp.mesh_shape = {o.space.gpus / cp, cp};
    probe.fsdp.mesh_dim_names = {"shard", "cp"};
    try {
      check_context_parallel(probe, cp);
    } catch (const InputError& e) {
      const std::string w = e.where();
      if (w.rfind("model", 0) == 0 || w.rfind("fsdp", 0) == 0 || w.rfind("training", 0) == 0)
        throw InputError("--cp",
                         fmt::format("has {}, which this scenario cannot use: {}", cp, e.what()),
                         "drop it from --cp");
    }
  }
  if (f.float8) {
    const HardwareProfile& hw = o.base.hardware.device;
    if (hw.peak_flops_fp8 <= 0)
      throw InputError(
          "--float8",
          "is given but hardware profile '" + hw.name + "' has no float8 rate (peak_flops_fp8)",
          "drop --float8, or plan for an H100 / H200 class GPU");
    if (o.base.training.float8.enabled())
      throw InputError("--float8", "is given but the scenario sets training.float8",
                       "drop --float8 to plan with the scenario's float8, or remove "
                       "training.float8 to search it");
    o.space.float8 = planner::float8_choices();
  }
  o.headroom = f.headroom;
  o.prune = !f.exhaustive;
  o.threads = f.threads;
  planner::check_space_options(o.space);
  ProgressBar bar;
  o.progress = [&bar](size_t d, size_t t, const char* phase) { bar(d, t, phase); };
  const planner::PlanResult r = planner::plan(o);
  bar.finish();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << planner::plan_text(o, r, static_cast<size_t>(f.top), wall);
  if (!f.json_out.empty()) {
    const json j = planner::plan_json(o, r, wall);
    write_output_file(f.json_out, j.dump(r.configs.size() <= 2000 ? 1 : -1) + "\n", "--json");
    std::cout << "  configurations written to " << printable(f.json_out) << "\n";
  }
  if (!f.write_scenario.empty()) {
    if (!r.best_fits()) {
      std::cout << "  nothing fits: no scenario written to " << printable(f.write_scenario) << "\n";
    } else {
      const planner::Candidate& c = r.configs.front().candidate;
      const std::string name = fs::path(f.write_scenario).stem().string();
      json j = planner::candidate_scenario_json(
          base, c, name, "Recommended by fullshard plan: " + planner::candidate_text(c) + ".");
      write_output_file(f.write_scenario, j.dump(2) + "\n", "--write-scenario");
      std::cout << "  recommended scenario written to " << printable(f.write_scenario) << "\n";
    }
  }
  return r.best_fits() ? 0 : 3;
}

}  // namespace fullshard::cli
