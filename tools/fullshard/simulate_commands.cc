#include "tools/fullshard/simulate_commands.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "core/scenario/scenario.h"
#include "simulator/report.h"
#include "simulator/simulate.h"
#include "simulator/worst_routing.h"
#include "tools/fullshard/plot_commands.h"

namespace fullshard::cli {

CLI::App* add_simulate_command(CLI::App& app, SimulateFlags& f) {
  auto* sim = app.add_subcommand("simulate", "predict per-rank memory and timing of a scenario");
  sim->add_option("scenario", f.scenario, "scenario JSON file")->required();
  sim->add_option("--json", f.json_out, "write the full report (JSON) here");
  sim->add_option("--ranks", f.ranks,
                  "classes: one rank per class of identical ranks; all: every rank");
  sim->add_flag("--no-checks", f.no_checks, "skip the collective / race / use-after-free checks");
  sim->add_option("--timeline", f.timeline_out,
                  "write the memory timeline page (.html) or picture (.svg) here");
  sim->add_option("--trace", f.trace_out, "write a Chrome trace (Perfetto, chrome://tracing) here");
  return sim;
}

int cmd_simulate(const SimulateFlags& f) {
  const std::string& path = f.scenario;
  Scenario s = load_scenario_file(path);
  sim::SimulateOptions o;
  if (f.ranks != "classes" && f.ranks != "all")
    throw InputError("--ranks", "is '" + f.ranks + "'",
                     "use --ranks classes (default) or --ranks all");
  o.all_ranks = f.ranks == "all";
  o.checks = !f.no_checks;
  // Outputs: never an input or each other; checked before the (long) simulation, written
  // atomically after it (NOTE [Atomic outputs], core/common/output_file.h).
  install_output_cleanup_on_signals();
  refuse_output_over_input("--json", f.json_out, {path});
  refuse_output_over_input("--timeline", f.timeline_out, {path, f.json_out});
  refuse_output_over_input("--trace", f.trace_out, {path, f.json_out, f.timeline_out});
  if (!f.json_out.empty()) check_output_writable("--json", f.json_out);
  if (!f.timeline_out.empty()) check_output_path("--timeline", f.timeline_out, {".html", ".svg"});
  if (!f.trace_out.empty()) {
    check_output_path("--trace", f.trace_out, {".json"});
    o.on_played = trace_writer(f.trace_out);
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
  // NOTE [Worst-case routing] (simulator/worst_routing.h): beside the assumed routing's peak.
  const std::optional<sim::WorstRoutingReport> worst = sim::simulate_worst_routing(s);
  if (worst)
    std::cout << fmt::format(
        "  worst-case routing (every token to the same top-k experts): peak allocated {}, peak "
        "reserved {} (rank {}){}\n",
        sim::format_bytes(worst->peak_allocated_bytes),
        sim::format_bytes(worst->peak_reserved_bytes), worst->peak_rank,
        worst->out_of_memory ? ", out of memory" : "");
  if (!f.json_out.empty()) {
    nlohmann::json j = sim::report_json(r);
    if (worst)
      j["worst_routing"] = {{"hot_expert_factor", worst->hot_expert_factor},
                            {"peak_allocated_bytes", worst->peak_allocated_bytes},
                            {"peak_reserved_bytes", worst->peak_reserved_bytes},
                            {"peak_rank", worst->peak_rank},
                            {"out_of_memory", worst->out_of_memory}};
    write_output_file(f.json_out, j.dump(1) + "\n", "--json");
    std::cout << "  report written to " << printable(f.json_out) << "\n";
  }
  if (!f.timeline_out.empty()) write_timeline(sim::report_json(r), f.timeline_out);
  if (!f.trace_out.empty())
    std::cout << "  trace written to " << printable(f.trace_out)
              << " (open it in Perfetto or chrome://tracing)\n";
  // Out of memory first: a rank that runs out stops early, and its peers then wait in
  // collectives it never issues; those problems follow from the out of memory (exit 3).
  if (r.out_of_memory || r.host_out_of_memory) return 3;
  if (!r.problems.empty()) return 1;
  return 0;
}

}  // namespace fullshard::cli
