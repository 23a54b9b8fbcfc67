#pragma once
// `fullshard train SCENARIO [--backend cpu|cuda] [--nproc N] [--metrics M.jsonl] [--steps K]
// ...`: trains a scenario for real (CPU processes over Gloo, or GPUs); workers re-enter here.
#include <string>

#include <CLI/CLI.hpp>

#include "core/scenario/checkpoint_save_mode.h"
#include "runner/launcher.h"

namespace fullshard::cli {

struct TrainFlags {
  runner::LaunchOptions launch;       // the run flags (run_flags.h) and train's own
  std::string on_nonfinite = "stop";  // a non-finite loss: stop or continue
  std::string json_out;               // the measured report (simulator format, one class per rank)
  // --checkpoint-mode, parsed (parse_checkpoint_save_mode) into launch.checkpoint_mode.
  std::string checkpoint_mode = checkpoint_save_mode_name(CheckpointSaveMode::kSync);
  CLI::App* command = nullptr;  // set by add_train_command: which flags were given
};

CLI::App* add_train_command(CLI::App& app, TrainFlags& flags);
int cmd_train(const TrainFlags& flags);

}  // namespace fullshard::cli
