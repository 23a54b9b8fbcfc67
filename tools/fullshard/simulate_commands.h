#pragma once
// `fullshard simulate SCENARIO.json [--json REPORT.json] [--ranks classes|all] [--no-checks]
// [--timeline T.html|T.svg] [--trace TRACE.json]`: per-rank memory and timing of a scenario,
// predicted by the simulator (docs/report-format.md, docs/plots.md).
#include <string>

#include <CLI/CLI.hpp>

namespace fullshard::cli {

struct SimulateFlags {
  std::string scenario;           // the scenario JSON file
  std::string json_out;           // the full report (JSON); empty: none
  std::string ranks = "classes";  // classes (one rank per class of identical ranks) or all
  bool no_checks = false;         // skip the collective / race / use-after-free checks
  std::string timeline_out;       // the memory timeline page (.html) or picture (.svg)
  std::string trace_out;          // a Chrome trace (.json)
};

CLI::App* add_simulate_command(CLI::App& app, SimulateFlags& flags);
// Exit codes: 0 ok; 1 protocol problems; 3 out of memory; bad input throws InputError (exit 2).
int cmd_simulate(const SimulateFlags& flags);

}  // namespace fullshard::cli
