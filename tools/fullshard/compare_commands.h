#pragma once
// `fullshard compare SCENARIO [--json OUT.json]`: simulates a scenario, runs it for real and
// compares peak memory per rank (equal to the byte, or exit 1).
#include <string>

#include <CLI/CLI.hpp>

#include "runner/launcher.h"

namespace fullshard::cli {

struct CompareFlags {
  runner::LaunchOptions launch;  // the run flags (run_flags.h)
  std::string json_out;          // predicted vs measured per rank (JSON)
  CLI::App* command = nullptr;   // set by add_compare_command: which flags were given
};

CLI::App* add_compare_command(CLI::App& app, CompareFlags& flags);
int cmd_compare(const CompareFlags& flags);

}  // namespace fullshard::cli
