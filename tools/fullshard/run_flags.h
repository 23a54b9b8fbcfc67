#pragma once
// The flags `fullshard train` and `fullshard compare` share: both run a scenario on a real
// backend through runner::launch_local, so both fill a runner::LaunchOptions the same way.
#include <CLI/CLI.hpp>

#include "runner/launcher.h"

namespace fullshard::cli {

// Adds SCENARIO, --backend, --collectives, --nproc, --steps, --data, --data-format, --timeout
// and --debug-collectives to `command`, bound to `o`.
void add_run_options(CLI::App& command, runner::LaunchOptions& o);

// The defaults (0 processes, -1 steps) mean "the scenario's"; given on the command line they
// are refused like every other out-of-range number (InputError naming the flag).
void check_run_options(const CLI::App& command, const runner::LaunchOptions& o);

// A failed launch's errors, one `fullshard: ...` line each on stderr.
void print_launch_errors(const runner::LaunchResult& r);

}  // namespace fullshard::cli
