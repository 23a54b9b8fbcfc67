#pragma once
// Subcommands of the fullshard CLI that run real backends (train_commands.cc).
#include <string>

#include "runner/launcher.h"

namespace fullshard::cli {

// fullshard train SCENARIO [--backend cpu|cuda] [--nproc N] [--metrics M.jsonl] [--steps K] ...
// With `json_out`, writes the measured report (simulator format, one class per rank).
int cmd_train(runner::LaunchOptions o, const std::string& json_out);
// fullshard compare SCENARIO [--json OUT.json]: simulated vs measured peak memory per rank.
int cmd_compare(const runner::LaunchOptions& o, const std::string& json_out);

}  // namespace fullshard::cli
