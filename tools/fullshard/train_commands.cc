#include "tools/fullshard/train_commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/build_info.h"
#include "core/common/error.h"
#include "core/common/output_file.h"
#include "core/model/model_flops.h"
#include "core/report/step_breakdown.h"
#include "core/scenario/scenario.h"
#include "simulator/report.h"
#include "simulator/simulate.h"
#include "tools/fullshard/backends.h"
#include "tools/fullshard/run_flags.h"
#include "tools/fullshard/op_table.h"

namespace fullshard::cli {
namespace {

// NOTE [Measured report]: a real run's report has the simulator's format (docs/report-format.md)
// with one "class" per rank, so `fullshard plot predicted.json measured.json` overlays them.
// Times are seconds on the rank's backend clock (host wall clock since the backend started);
// step figures are the last step's, the slowest rank's. Each worker writes its rank's part in
// the report model predicted runs use (core/report/rank_report.h).
nlohmann::json measured_report(const Scenario& s, const runner::LaunchResult& r) {
  sim::SimulationReport rep;
  rep.scenario = s.name;
  rep.world_size = s.world_size();
  rep.simulated_all_ranks = true;
  rep.parameters = parameter_count(s.model);
  rep.capacity_bytes = s.hardware.allocator.capacity_bytes;
  rep.model_flops_per_token = model_flops_per_token(s.model, s.training.seq_len);
  const bool low =
      s.fsdp.mixed_precision.param_dtype && *s.fsdp.mixed_precision.param_dtype != DType::kFloat32;
  const double peak = low ? s.hardware.device.peak_flops_bf16 : s.hardware.device.peak_flops_fp32;
  double hardware_flops_per_s = 0;
  if (!r.steps.empty()) {
    const auto& last = r.steps.back();
    rep.step_time_s = last.step_time_s;
    rep.tokens_per_s_per_gpu = last.tokens_per_s / rep.world_size;
    // As the simulator: MFU counts model FLOPs (torchtitan's count), not the kernels' FLOPs.
    if (peak > 0) rep.mfu = rep.model_flops_per_token * rep.tokens_per_s_per_gpu / peak;
    hardware_flops_per_s = last.flops_per_s / rep.world_size;
    // Whole-run figures per step, worst rank, as the simulator averages them.
    for (const auto& st : r.steps) {
      rep.compute_s += st.compute_s / static_cast<double>(r.steps.size());
      rep.comm_s += st.comm_s / static_cast<double>(r.steps.size());
      rep.exposed_comm_s += st.exposed_comm_s / static_cast<double>(r.steps.size());
    }
  }
  // Every step ran: none extrapolated (NOTE [Steady state] is the simulator's).
  rep.steps = rep.simulated_steps = static_cast<int>(r.steps.size());
  rep.extrapolated_steps = 0;
  for (const auto& st : r.steps) {
    rep.total_time_s += st.step_time_s;
    rep.total_tokens += st.tokens_per_s * st.step_time_s;
  }
  if (!r.steps.empty())
    rep.tokens_per_step = rep.total_tokens / static_cast<double>(r.steps.size());
  double slowest = -1;
  for (const auto& j : r.rank_reports) {
    rep.classes.push_back(rank_report_from_json(j.at("class"), j.at("timeline")));
    if (j.contains("last_step") && rep.classes.back().last_step_s > slowest) {
      slowest = rep.classes.back().last_step_s;
      rep.last_step = step_breakdown_from_json(j.at("last_step"));
      rep.last_step_rank = rep.classes.back().representative;
    }
  }
  nlohmann::json out = sim::report_json(rep);
  out["time_model"] = r.backend == "cpu"
                          ? "measured: CPU backend over Gloo (host wall-clock times)"
                          : "measured: " + r.backend + " backend (host wall-clock times)";
  out["measured"] = true;
  out["build"] = build_description();  // portable or host-tuned (NOTE [Host-tuned builds])
  out["backend"] = r.backend;
  // NOTE [Measured MFU]: what the MFU divides by, and the kernels' own FLOP rate (recomputation
  // included), so a reader can tell model efficiency from hardware efficiency.
  out["mfu_peak_flops_per_s"] = peak;
  out["mfu_peak"] =
      fmt::format("{} peak of hardware profile '{}' ({})", low ? "bf16" : "fp32",
                  s.hardware.device.name, low ? "peak_flops_bf16" : "peak_flops_fp32");
  out["hardware_flops_per_s_per_gpu"] = hardware_flops_per_s;
  // The backend's measured matmul rate (CPU: OpenBLAS sgemm timed by each worker at start-up),
  // the ranks' mean, and the model FLOP rate as a fraction of it: how far the run is from what
  // this machine's matmuls do now, beside the profile's nominal peak.
  std::vector<double> probes;
  std::string probe_source;
  for (const auto& j : r.rank_reports)
    if (j.contains("matmul_probe")) {
      probes.push_back(j.at("matmul_probe").at("flops_per_s").get<double>());
      probe_source = j.at("matmul_probe").at("source").get<std::string>();
    }
  if (!probes.empty() && probes.size() == r.rank_reports.size()) {
    double mean = 0;
    for (double p : probes) mean += p / static_cast<double>(probes.size());
    std::vector<double> gflops;
    for (double p : probes) gflops.push_back(p * 1e-9);
    out["sgemm_gflops"] = mean * 1e-9;
    out["sgemm_gflops_per_rank"] = gflops;
    out["sgemm_source"] = probe_source;
    out["mfu_of_sgemm"] =
        mean > 0 ? rep.model_flops_per_token * rep.tokens_per_s_per_gpu / mean : 0.0;
  }
  // Per rank, its calls of the cuDNN attention kinds by path (NOTE [Attention path counter]).
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& m : r.ranks)
    if (!m.path_counts.empty()) {
      nlohmann::json c = nlohmann::json::object();
      for (const auto& [path, calls] : m.path_counts) c[path] = calls;
      paths.push_back({{"rank", m.rank}, {"calls", c}});
    }
  if (!paths.empty()) out["attention_paths"] = paths;
  nlohmann::json losses = nlohmann::json::array();
  for (const auto& st : r.steps) losses.push_back(st.loss);
  out["loss_per_step"] = losses;
  // Rank 0's per-op table of every step, with the simulator's times (NOTE [Per-op times]).
  out["ops_per_step"] = ops_per_step_json(r.steps);
  // Checkpoint saves per rank (NOTE [Asynchronous save]): host staging bytes, time exposed to
  // training and time hidden behind it.
  if (!r.ranks.empty() && r.ranks[0].checkpoint.saves > 0) {
    nlohmann::json ck = nlohmann::json::array();
    for (const auto& m : r.ranks) ck.push_back(runner::checkpoint_stats_json(m.checkpoint));
    out["checkpoint_saves"] = ck;
  }
  return out;
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainFlags& f) {
  runner::LaunchOptions& lo = f.launch;
  auto* train =
      app.add_subcommand("train", "train a scenario for real (CPU processes over Gloo, or GPUs)");
  add_run_options(*train, lo);
  train->add_option(
      "--metrics", lo.metrics_path,
      "write one JSON object per step here (JSONL; PATH.partial until the run ends well)");
  train
      ->add_option("--on-nonfinite", f.on_nonfinite,
                   "a non-finite loss: stop (default) or continue")
      ->check(CLI::IsMember({"stop", "continue"}));
  train->add_option("--json", f.json_out,
                    "write the measured report (memory timeline per rank) here");
  train->add_option("--eval-every", lo.eval_every,
                    "print the validation loss (training.data.val_path) after every N steps and "
                    "after the last (0: never)");
  train->add_option("--eval-batches", lo.eval_batches,
                    "validation batches per evaluation (default 4)");
  train->add_option("--checkpoint-dir", lo.checkpoint_dir,
                    "write sharded checkpoints here (docs/checkpoints.md)");
  train->add_option("--checkpoint-every", lo.checkpoint_every,
                    "save a checkpoint after every N steps (0: never)");
  train->add_option("--keep-last", lo.keep_last,
                    "keep only the newest K committed checkpoints (0: all, the default)");
  train->add_option("--checkpoint-mode", f.checkpoint_mode,
                    "sync (the default: training waits for the save) or async (staged to host "
                    "memory, written by a "
                    "background thread while training goes on)");
  train
      ->add_option(
          "--resume", lo.resume,
          "continue from a checkpoint: latest (under --checkpoint-dir, the default) or a folder")
      ->expected(0, 1);
  train->add_option(
      "--init-from", lo.init_from,
      "start from safetensors weights (a file, or a folder with model.safetensors[.index.json])");
  f.command = train;
  return train;
}

int cmd_train(const TrainFlags& f) {
  check_run_options(*f.command, f.launch);
  runner::LaunchOptions o = f.launch;
  o.checkpoint_mode = parse_checkpoint_save_mode(f.checkpoint_mode, "--checkpoint-mode");
  const std::string& json_out = f.json_out;
  if (f.on_nonfinite == "continue") o.on_nonfinite = runner::LaunchOptions::OnNonFinite::kContinue;
  if (f.command->count("--resume") > 0 && o.resume.empty())
    o.resume = "latest";  // --resume with no value
  if (runner::is_worker_environment()) return runner::worker_main(o, real_backends());
  Scenario s = runner::load_run_scenario(o);
  if (!json_out.empty()) {
    refuse_output_over_input("--json", json_out, {o.scenario_path, o.metrics_path});
    check_output_writable("--json", json_out);
    o.collect_reports = true;
  }
  const int steps = o.steps >= 0 ? o.steps : s.training.steps;
  const runner::BackendKind& kind = real_backends().choose(o.backend, s);
  runner::validate_launch(o, s, kind);
  // The per-op table's predicted times (NOTE [Per-op times]): the simulator on this run.
  o.predicted_ops = predict_ops(s, steps);
  std::fprintf(stderr, "training %s: %d ranks (processes) %s, %d steps\n", o.scenario_path.c_str(),
               s.world_size(),
               kind.name == "cpu" ? "over Gloo" : ("on the " + kind.name + " backend").c_str(),
               steps);
  runner::LaunchResult r = runner::launch_local(o, real_backends());
  if (r.exit_code != 0) {
    print_launch_errors(r);
    return r.exit_code;
  }
  if (!r.steps.empty()) {
    const auto& first = r.steps.front();
    const auto& last = r.steps.back();
    // Steady state: the median step after the first (which also pays for first-touch page
    // faults and the process groups' connection set-up); the median, not the mean, so that one
    // slow step (a page-cache miss, another process) does not move it.
    const size_t from = r.steps.size() > 1 ? 1 : 0;
    std::vector<const runner::StepSummary*> steady;
    for (size_t i = from; i < r.steps.size(); ++i) steady.push_back(&r.steps[i]);
    std::sort(steady.begin(), steady.end(),
              [](const auto* a, const auto* b) { return a->step_time_s < b->step_time_s; });
    const runner::StepSummary& med = *steady[(steady.size() - 1) / 2];
    std::cout << fmt::format(
        "trained {} steps in {:.1f} s: loss {:.4f} -> {:.4f}, peak allocated {}, peak reserved {} "
        "per rank\n",
        r.steps.size(), r.wall_s, first.loss, last.loss,
        sim::format_bytes(last.peak_allocated_bytes), sim::format_bytes(last.peak_reserved_bytes));
    if (med.step_time_s > 0)
      std::cout << fmt::format(
          "  {}: {:.3f} s/step, {:.0f} tokens/s (all ranks), {:.1f} GFLOP/s (all ranks), exposed "
          "communication {:.1f}% of the step\n",
          from == 1 ? "median step after the first" : "step", med.step_time_s, med.tokens_per_s,
          med.flops_per_s * 1e-9, 100.0 * med.exposed_comm_s / med.step_time_s);
  }
  if (!r.ranks.empty() && r.ranks[0].checkpoint.saves > 0) {
    // The slowest rank's exposed time; rank 0's background time (it also commits).
    runner::CheckpointSaveStats worst = r.ranks[0].checkpoint;
    for (const auto& m : r.ranks) {
      worst.exposed_s = std::max(worst.exposed_s, m.checkpoint.exposed_s);
      worst.staging_bytes = std::max(worst.staging_bytes, m.checkpoint.staging_bytes);
    }
    if (worst.mode == CheckpointSaveMode::kAsync)
      std::cout << fmt::format(
          "  checkpoints: {} async saves, host staging {} per rank (largest), save time exposed "
          "{:.3f} s "
          "(slowest rank), hidden behind training {:.3f} s of {:.3f} s written in the background "
          "(rank 0)\n",
          worst.saves, sim::format_bytes(worst.staging_bytes), worst.exposed_s, worst.hidden_s,
          worst.background_s);
    else
      std::cout << fmt::format(
          "  checkpoints: {} sync saves, save time exposed {:.3f} s (slowest rank)\n", worst.saves,
          worst.exposed_s);
  }
  // Which path ran the cuDNN attention calls (rank 0's; every
  // rank's where they differ).
  for (const auto& m : r.ranks) {
    if (m.path_counts.empty() || (m.rank != 0 && m.path_counts == r.ranks[0].path_counts)) continue;
    std::string line;
    for (const auto& [path, calls] : m.path_counts)
      line += fmt::format("{}{}: {}", line.empty() ? "" : "; ", path, calls);
    std::cout << fmt::format("  attention calls by path (rank {}): {}\n", m.rank, line);
  }
  for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it)
    if (!std::isnan(it->eval_loss)) {
      std::cout << fmt::format("  validation loss {:.4f} after step {} ({} batches)\n",
                               it->eval_loss, it->step + 1, o.eval_batches);
      break;
    }
  const nlohmann::json report = json_out.empty() ? nlohmann::json() : measured_report(s, r);
  if (report.contains("sgemm_gflops") && report.value("mfu", 0.0) > 0)
    std::cout << fmt::format(
        "  last step: MFU {:.2f}% of the {} ({:.1f} GFLOP/s), {:.1f}% of measured sgemm ({:.1f} "
        "GFLOP/s per rank: {})\n",
        100 * report.at("mfu").get<double>(), report.at("mfu_peak").get<std::string>(),
        report.at("mfu_peak_flops_per_s").get<double>() * 1e-9,
        100 * report.at("mfu_of_sgemm").get<double>(), report.at("sgemm_gflops").get<double>(),
        report.at("sgemm_source").get<std::string>());
  if (!r.steps.empty() && !r.steps.back().ops.empty())
    std::cout << differ_most_text(r.steps.back().ops, 5);
  if (!o.metrics_path.empty()) std::cout << "  metrics written to " << o.metrics_path << "\n";
  if (!json_out.empty()) {
    write_output_file(json_out, report.dump(1) + "\n", "--json");
    std::cout << "  measured report written to " << json_out
              << " (fullshard plot overlays it on a simulated one)\n";
  }
  return 0;
}

}  // namespace fullshard::cli
