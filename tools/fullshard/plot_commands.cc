#include "tools/fullshard/plot_commands.h"

#include <fstream>
#include <iostream>

#include "core/common/error.h"
#include "simulator/trace.h"
#include "tools/plot/plot.h"

namespace fullshard::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void write_file(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw InputError(flag, "could not write '" + path + "'", "check the disk and the path");
}

std::string render(std::vector<plot::Report> reports, const std::string& path, const plot::PlotOptions& o) {
  return ends_with(path, ".svg") ? plot::render_svg(std::move(reports), o) : plot::render_html(std::move(reports), o);
}

}  // namespace

void check_output_path(const std::string& flag, const std::string& path, const std::vector<std::string>& extensions) {
  bool ok = false;
  std::string list;
  for (const auto& e : extensions) {
    ok = ok || ends_with(path, e);
    list += (list.empty() ? "" : " or ") + e;
  }
  if (!ok) throw InputError(flag, "is '" + path + "'", "give a file name ending in " + list);
  std::ofstream probe(path, std::ios::app);
  if (!probe) throw InputError(flag, "cannot write '" + path + "'", "give a writable file path");
}

int cmd_plot(const std::vector<std::string>& paths, const std::string& out, std::optional<int> rank,
             const std::string& title) {
  check_output_path("-o", out, {".html", ".svg"});
  std::vector<plot::Report> reports;
  for (const auto& p : paths) reports.push_back(plot::load_report(p));
  plot::PlotOptions o;
  o.rank = rank;
  o.title = title;
  write_file("-o", out, render(std::move(reports), out, o));
  std::cout << "plot written to " << out << "\n";
  return 0;
}

void write_timeline(const nlohmann::json& report, const std::string& path) {
  std::vector<plot::Report> reports;
  reports.push_back(plot::parse_report(report, path));
  reports.back().label = "simulated";
  write_file("--timeline", path, render(std::move(reports), path, {}));
  std::cout << "  timeline written to " << path << "\n";
}

std::function<void(const sim::PlayedRun&)> trace_writer(const std::string& path) {
  return [path](const sim::PlayedRun& run) {
    std::ofstream f(path, std::ios::binary);
    sim::write_chrome_trace(run, f);
    if (!f) throw InputError("--trace", "could not write '" + path + "'", "check the disk and the path");
  };
}

}  // namespace fullshard::cli
