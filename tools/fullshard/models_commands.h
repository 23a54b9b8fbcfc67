#pragma once
// `fullshard models [--json]`: the model zoo with exact parameter counts.
#include <CLI/CLI.hpp>

namespace fullshard::cli {

struct ModelsFlags {
  bool json = false;  // JSON instead of the table
};

CLI::App* add_models_command(CLI::App& app, ModelsFlags& flags);
int cmd_models(const ModelsFlags& flags);

}  // namespace fullshard::cli
