// fullshard: FSDP2-style sharded training, simulated before it runs.
//   fullshard simulate SCENARIO.json [--json REPORT.json] [--ranks classes|all] [--no-checks]
//                     [--timeline T.html|T.svg] [--trace TRACE.json]
//   fullshard plot REPORT.json [MORE.json ...] -o OUT.html|OUT.svg [--rank R] [--title T]
//   fullshard plot METRICS.jsonl|RUN.csv [MORE ...] -o OUT.html|OUT.svg   (training curves)
//   fullshard train SCENARIO.json [--backend cpu|cuda] [--nproc N] [--metrics M.jsonl] [--steps K]
//   fullshard compare SCENARIO.json [--json OUT.json]
//   fullshard models [--json]
//   fullshard plan --model NAME|--hf-config C.json|--scenario S.json --gpus N --gpus-per-node G
//   --gpu PROFILE
//                  --seq-len L [--global-batch B] [--headroom F] [--json OUT.json]
//                  [--write-scenario BEST.json]
//   fullshard calibrate MEASUREMENTS.json [--hardware PROFILE] [-o FITTED.json]
// Exit codes: 0 ok; 1 the simulation found protocol problems, a rank failed, or predicted and
// measured memory differ; 2 bad input; 3 out of memory (plan: nothing fits).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "core/common/build_info.h"
#include "core/common/error.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "core/model/model_config.h"
#include "core/scenario/scenario.h"
#include "simulator/report.h"
#include "simulator/simulate.h"
#include "tools/fullshard/calibrate_commands.h"
#include "tools/fullshard/checkpoint_commands.h"
#include "tools/fullshard/data_commands.h"
#include "tools/fullshard/pipeline_commands.h"
#include "tools/fullshard/commands.h"
#include "tools/fullshard/plan_commands.h"
#include "tools/fullshard/plot_commands.h"

namespace {

int cmd_simulate(const std::string& path, const std::string& json_out, const std::string& ranks,
                 bool checks, const std::string& timeline_out, const std::string& trace_out) {
  using namespace fullshard;
  Scenario s = load_scenario_file(path);
  sim::SimulateOptions o;
  if (ranks != "classes" && ranks != "all")
    throw InputError("--ranks", "is '" + ranks + "'",
                     "use --ranks classes (default) or --ranks all");
  o.all_ranks = ranks == "all";
  o.checks = checks;
  // Outputs: never an input or each other; checked before the (long) simulation, written
  // atomically after it (NOTE [Atomic outputs], core/common/output_file.h).
  install_output_cleanup_on_signals();
  refuse_output_over_input("--json", json_out, {path});
  refuse_output_over_input("--timeline", timeline_out, {path, json_out});
  refuse_output_over_input("--trace", trace_out, {path, json_out, timeline_out});
  if (!json_out.empty()) check_output_writable("--json", json_out);
  if (!timeline_out.empty()) cli::check_output_path("--timeline", timeline_out, {".html", ".svg"});
  if (!trace_out.empty()) {
    cli::check_output_path("--trace", trace_out, {".json"});
    o.on_played = cli::trace_writer(trace_out);
  }
  std::fprintf(stderr, "simulating %s (%d ranks)...\n", printable(path).c_str(), s.world_size());
  // Progress on stderr for runs that record many rank programs.
  auto start = std::chrono::steady_clock::now();
  o.progress = [start, last = -1](size_t done, size_t total) mutable {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int pct = static_cast<int>(100 * done / total);
    if (secs < 1.0 || pct == last) return;
    last = pct;
    std::fprintf(stderr, "\r  recorded %zu/%zu rank programs (%d%%, %.0f s)%s", done, total, pct,
                 secs, done == total ? "\n" : "");
    std::fflush(stderr);
  };
  sim::SimulationReport r = sim::simulate_scenario(s, o);
  std::cout << sim::report_summary(r);
  if (!json_out.empty()) {
    write_output_file(json_out, sim::report_json(r).dump(1) + "\n", "--json");
    std::cout << "  report written to " << printable(json_out) << "\n";
  }
  if (!timeline_out.empty()) cli::write_timeline(sim::report_json(r), timeline_out);
  if (!trace_out.empty())
    std::cout << "  trace written to " << printable(trace_out)
              << " (open it in Perfetto or chrome://tracing)\n";
  // Out of memory first: a rank that runs out stops early, and its peers then wait in
  // collectives it never issues; those problems follow from the out of memory (exit 3).
  if (r.out_of_memory || r.host_out_of_memory) return 3;
  if (!r.problems.empty()) return 1;
  return 0;
}

int cmd_models(bool json) {
  using namespace fullshard;
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& m : model_zoo())
      arr.push_back({{"name", m.name},
                     {"params", parameter_count(m)},
                     {"layers", m.n_layers},
                     {"dim", m.dim},
                     {"heads", m.n_heads},
                     {"kv_heads", m.n_kv_heads},
                     {"ffn_dim", m.ffn_dim},
                     {"vocab", m.vocab_size}});
    std::cout << arr.dump(1) << "\n";
    return 0;
  }
  std::cout << fmt::format("{:<18} {:>16} {:>7} {:>6} {:>9} {:>7} {:>8}\n", "name", "params",
                           "layers", "dim", "heads/kv", "ffn", "vocab");
  for (const auto& m : model_zoo())
    std::cout << fmt::format(
        "{:<18} {:>16} {:>7} {:>6} {:>9} {:>7} {:>8}\n", m.name, parameter_count(m), m.n_layers,
        m.dim, fmt::format("{}/{}", m.n_heads, m.n_kv_heads), m.ffn_dim, m.vocab_size);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fullshard: PyTorch-FSDP2-style sharded training, simulated before it runs"};
  app.set_version_flag("--version", fullshard::build_description());
  app.require_subcommand(1);
  std::string scenario, json_out, ranks = "classes";
  bool no_checks = false, models_json = false;
  auto* sim = app.add_subcommand("simulate", "predict per-rank memory and timing of a scenario");
  sim->add_option("scenario", scenario, "scenario JSON file")->required();
  sim->add_option("--json", json_out, "write the full report (JSON) here");
  sim->add_option("--ranks", ranks,
                  "classes: one rank per class of identical ranks; all: every rank");
  sim->add_flag("--no-checks", no_checks, "skip the collective / race / use-after-free checks");
  std::string timeline_out, trace_out;
  sim->add_option("--timeline", timeline_out,
                  "write the memory timeline page (.html) or picture (.svg) here");
  sim->add_option("--trace", trace_out, "write a Chrome trace (Perfetto, chrome://tracing) here");
  fullshard::runner::LaunchOptions lo;
  auto add_run_options = [&](CLI::App* c) {
    c->add_option("scenario", lo.scenario_path, "scenario JSON file")->required();
    c->add_option("--backend", lo.backend,
                  "cpu (CPU processes over Gloo; 'gloo' is an alias) or cuda (one GPU per rank, "
                  "NCCL); default: "
                  "cpu for the 'cpu' hardware profile, cuda for GPU profiles");
    c->add_option("--collectives", lo.collectives,
                  "CUDA backend: nccl (one GPU per rank) or gloo (staged through pinned host "
                  "memory; ranks may "
                  "share a GPU); default: nccl, gloo when ranks outnumber the GPUs")
        ->check(CLI::IsMember({"nccl", "gloo"}));
    c->add_option("--nproc", lo.nproc, "worker processes (default: the scenario's world size)");
    c->add_option("--steps", lo.steps, "optimizer steps (default: training.steps)");
    c->add_option("--data", lo.data,
                  "train on these tokens instead of training.data: a token file (llm.c header, or "
                  "--data-format), a "
                  "folder or glob of shards, or a .txt / .jsonl file (byte-level)");
    c->add_option("--data-format", lo.data_format,
                  "how --data is read (default: training.data.format, else auto)")
        ->check(CLI::IsMember({"auto", "llmc", "uint16", "uint32", "text", "jsonl"}));
    c->add_option("--timeout", lo.timeout_s,
                  "seconds a collective may wait for its peers (default 60)");
    c->add_flag("--debug-collectives", lo.check_fingerprints,
                "exchange collective fingerprints before each collective (like "
                "TORCH_DISTRIBUTED_DEBUG=DETAIL)");
  };
  auto* train =
      app.add_subcommand("train", "train a scenario for real (CPU processes over Gloo, or GPUs)");
  add_run_options(train);
  train->add_option(
      "--metrics", lo.metrics_path,
      "write one JSON object per step here (JSONL; PATH.partial until the run ends well)");
  std::string on_nonfinite = "stop";
  train->add_option("--on-nonfinite", on_nonfinite, "a non-finite loss: stop (default) or continue")
      ->check(CLI::IsMember({"stop", "continue"}));
  std::string train_json;
  train->add_option("--json", train_json,
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
  train->add_option("--checkpoint-mode", lo.checkpoint_mode,
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
  std::string compare_json;
  auto* compare = app.add_subcommand(
      "compare", "simulate a scenario, run it for real, compare peak memory per rank");
  add_run_options(compare);
  compare->add_option("--json", compare_json, "write predicted vs measured per rank (JSON) here");
  std::vector<std::string> plot_inputs;
  std::string plot_out, plot_title;
  std::optional<int> plot_rank;
  auto* plot = app.add_subcommand(
      "plot",
      "memory timeline of report JSON files, or training curves of --metrics .jsonl / "
      "step,loss .csv files: an HTML page or a static SVG");
  plot->add_option("reports", plot_inputs,
                   "report JSON files (simulated or measured), or --metrics .jsonl / step,loss "
                   ".csv files; several overlay")
      ->required();
  plot->add_option("-o,--output", plot_out,
                   "OUT.html (interactive page) or OUT.svg (static picture)")
      ->required();
  plot->add_option("--rank", plot_rank,
                   "show the timeline holding this rank first (HTML) or only (SVG)");
  plot->add_option("--title", plot_title, "title (default: the scenarios' names)");
  fullshard::cli::PlanFlags plan_flags;
  auto* plan = fullshard::cli::add_plan_command(app, plan_flags);
  fullshard::cli::CalibrateFlags calibrate_flags;
  auto* calibrate = fullshard::cli::add_calibrate_command(app, calibrate_flags);
  fullshard::cli::CheckpointFlags checkpoint_flags;
  auto* checkpoint = fullshard::cli::add_checkpoint_command(app, checkpoint_flags);
  fullshard::cli::DataFlags data_flags;
  auto* data = fullshard::cli::add_data_command(app, data_flags);
  fullshard::cli::PipelineFlags pipeline_flags;
  auto* pipeline = fullshard::cli::add_pipeline_command(app, pipeline_flags);
  auto* models = app.add_subcommand("models", "list the model zoo with exact parameter counts");
  models->add_flag("--json", models_json, "JSON output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "fullshard: " << e.what() << " (run `fullshard --help`)\n";
    return 2;
  }
  try {
    if (*sim) return cmd_simulate(scenario, json_out, ranks, !no_checks, timeline_out, trace_out);
    if (*plot) return fullshard::cli::cmd_plot(plot_inputs, plot_out, plot_rank, plot_title);
    if (*models) return cmd_models(models_json);
    if (*plan) return fullshard::cli::cmd_plan(plan_flags);
    if (*calibrate) return fullshard::cli::cmd_calibrate(calibrate_flags);
    if (*checkpoint) return fullshard::cli::cmd_checkpoint(checkpoint_flags);
    if (*data) return fullshard::cli::cmd_data(data_flags);
    if (*pipeline) return fullshard::cli::cmd_pipeline(pipeline_flags);
    // The defaults (0 processes, -1 steps) mean "the scenario's"; given on the command line
    // they are refused like every other out-of-range number.
    for (CLI::App* c : {train, compare}) {
      if (!*c) continue;
      if (c->count("--nproc") > 0 && lo.nproc < 1)
        throw fullshard::InputError("--nproc", "is " + std::to_string(lo.nproc),
                                    "use 1 or more worker processes, or leave --nproc out for "
                                    "the scenario's world size");
      if (c->count("--steps") > 0 && lo.steps < 0)
        throw fullshard::InputError("--steps", "is " + std::to_string(lo.steps),
                                    "use 0 or more optimizer steps, or leave --steps out for "
                                    "training.steps");
    }
    if (*train) {
      if (on_nonfinite == "continue")
        lo.on_nonfinite = fullshard::runner::LaunchOptions::OnNonFinite::kContinue;
      if (train->count("--resume") > 0 && lo.resume.empty())
        lo.resume = "latest";  // --resume with no value
      return fullshard::cli::cmd_train(lo, train_json);
    }
    if (*compare) {
      lo.progress = false;
      return fullshard::cli::cmd_compare(lo, compare_json);
    }
  } catch (const fullshard::InputError& e) {
    std::cerr << "fullshard: error: " << e.what() << "\n";
    return 2;
  } catch (const fullshard::InternalError& e) {
    std::cerr << "fullshard: " << fullshard::printable(e.what(), 1024)
              << " (please report this bug)\n";
    return 70;
  } catch (const std::exception& e) {
    std::cerr << "fullshard: error: " << fullshard::printable(e.what(), 1024) << "\n";
    return 1;
  }
  return 0;
}
