#include "tools/fullshard/plot_commands.h"

#include <algorithm>
#include <fstream>
#include <iostream>

#include "core/common/error.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "simulator/trace.h"
#include "tools/plot/plot.h"
#include "tools/plot/training_plot.h"

namespace fullshard::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string render(std::vector<plot::Report> reports, const std::string& path,
                   const plot::PlotOptions& o) {
  return ends_with(path, ".svg") ? plot::render_svg(std::move(reports), o)
                                 : plot::render_html(std::move(reports), o);
}

}  // namespace

void check_output_path(const std::string& flag, const std::string& path,
                       const std::vector<std::string>& extensions) {
  bool ok = false;
  std::string list;
  for (const auto& e : extensions) {
    ok = ok || ends_with(path, e);
    list += (list.empty() ? "" : " or ") + e;
  }
  if (!ok) throw InputError(flag, "is '" + path + "'", "give a file name ending in " + list);
  check_output_writable(flag, path);  // creates nothing: a later failure leaves no empty file
}

CLI::App* add_plot_command(CLI::App& app, PlotFlags& f) {
  auto* plot = app.add_subcommand(
      "plot",
      "memory timeline of report JSON files, or training curves of --metrics .jsonl / "
      "step,loss .csv files: an HTML page or a static SVG");
  plot->add_option("reports", f.inputs,
                   "report JSON files (simulated or measured), or --metrics .jsonl / step,loss "
                   ".csv files; several overlay")
      ->required();
  plot->add_option("-o,--output", f.out, "OUT.html (interactive page) or OUT.svg (static picture)")
      ->required();
  plot->add_option("--rank", f.rank,
                   "show the timeline holding this rank first (HTML) or only (SVG)");
  plot->add_option("--title", f.title, "title (default: the scenarios' names)");
  return plot;
}

int cmd_plot(const PlotFlags& f) {
  const std::vector<std::string>& paths = f.inputs;
  const std::string& out = f.out;
  const std::optional<int>& rank = f.rank;
  const std::string& title = f.title;
  install_output_cleanup_on_signals();
  check_output_path("-o", out, {".html", ".svg"});
  refuse_output_over_input("-o", out, paths);
  // NOTE [Training curves]: a --metrics .jsonl or a step,loss .csv among the inputs makes this a
  // plot of training (loss, tokens/s, memory per step) instead of memory timelines; a .json among
  // them is then a measured report read for its loss_per_step.
  if (std::any_of(paths.begin(), paths.end(), plot::is_training_input)) {
    if (rank)
      throw InputError("--rank", "is given for a plot of training curves",
                       "leave --rank out (it picks a memory timeline)");
    std::vector<plot::TrainingRun> runs;
    for (const auto& p : paths) runs.push_back(plot::load_training_run(p));
    const std::string t = title.empty() ? plot::default_training_title(runs) : title;
    write_output_file(out,
                      ends_with(out, ".svg") ? plot::render_training_svg(runs, t)
                                             : plot::render_training_html(runs, t),
                      "-o");
    std::cout << "training curves of " << runs.size() << " run(s) written to " << printable(out)
              << "\n";
    return 0;
  }
  std::vector<plot::Report> reports;
  for (const auto& p : paths) reports.push_back(plot::load_report(p));
  plot::PlotOptions o;
  o.rank = rank;
  o.title = title;
  write_output_file(out, render(std::move(reports), out, o), "-o");
  std::cout << "plot written to " << printable(out) << "\n";
  return 0;
}

void write_timeline(const nlohmann::json& report, const std::string& path) {
  std::vector<plot::Report> reports;
  reports.push_back(plot::parse_report(report, path));
  reports.back().label = "simulated";
  write_output_file(path, render(std::move(reports), path, {}), "--timeline");
  std::cout << "  timeline written to " << printable(path) << "\n";
}

std::function<void(const sim::PlayedRun&)> trace_writer(const std::string& path) {
  return [path](const sim::PlayedRun& run) {
    OutputFile f(path, "--trace");
    sim::write_chrome_trace(run, f.stream());
    f.commit();
  };
}

}  // namespace fullshard::cli
