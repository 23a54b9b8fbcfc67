#pragma once
// Subcommands of the fullshard CLI that run real backends (train_commands.cc).
#include <string>

#include "backends/cpu/launcher.h"

namespace fullshard::cli {

// fullshard train SCENARIO --backend gloo [--nproc N] [--metrics M.jsonl] [--steps K] ...
int cmd_train(const cpu::LaunchOptions& o, const std::string& backend);
// fullshard compare SCENARIO [--json OUT.json]: simulated vs measured peak memory per rank.
int cmd_compare(const cpu::LaunchOptions& o, const std::string& json_out);

}  // namespace fullshard::cli
