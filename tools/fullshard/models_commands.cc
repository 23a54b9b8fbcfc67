#include "tools/fullshard/models_commands.h"

#include <fmt/format.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "core/model/model_config.h"

namespace fullshard::cli {

CLI::App* add_models_command(CLI::App& app, ModelsFlags& f) {
  auto* models = app.add_subcommand("models", "list the model zoo with exact parameter counts");
  models->add_flag("--json", f.json, "JSON output");
  return models;
}

int cmd_models(const ModelsFlags& f) {
  if (f.json) {
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

}  // namespace fullshard::cli
