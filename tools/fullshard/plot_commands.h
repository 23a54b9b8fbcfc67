#pragma once
// The CLI's pictures (docs/plots.md): `fullshard plot` and simulate's --timeline / --trace.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "simulator/simulate.h"

namespace fullshard::cli {

struct PlotFlags {
  // Report JSON files (simulated or measured), or --metrics .jsonl / step,loss .csv files.
  std::vector<std::string> inputs;
  std::string out;          // OUT.html (interactive page) or OUT.svg (static picture)
  std::optional<int> rank;  // the timeline shown first (HTML) or only (SVG)
  std::string title;        // default: the scenarios' names
};

// fullshard plot REPORT.json [MORE.json ...] -o OUT.html|OUT.svg [--rank R] [--title T]
CLI::App* add_plot_command(CLI::App& app, PlotFlags& flags);
int cmd_plot(const PlotFlags& flags);

// Fails early (InputError naming `flag`) when `path` does not end in one of `extensions` or
// cannot be written, so a long simulation does not run for nothing.
void check_output_path(const std::string& flag, const std::string& path,
                       const std::vector<std::string>& extensions);

// simulate --timeline PATH: the page (.html) or static picture (.svg) of a report's JSON.
void write_timeline(const nlohmann::json& report, const std::string& path);

// simulate --trace PATH: a SimulateOptions::on_played hook writing the Chrome trace.
std::function<void(const sim::PlayedRun&)> trace_writer(const std::string& path);

}  // namespace fullshard::cli
