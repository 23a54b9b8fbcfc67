#include "tools/fullshard/calibrate_commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "core/scenario/hardware_profile.h"
#include "core/scenario/json_reader.h"
#include "simulator/cost/calibrate.h"
#include "simulator/cost/calibration_csv.h"

namespace fullshard::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_json_path(const std::string& s) {
  return s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0;
}

json table_json(const EfficiencyTable& t) {
  json a = json::array();
  for (const auto& [threshold, eff] : t.rows) a.push_back({threshold, eff});
  return a;
}

json figure_json(const HardwareProfile& p, const std::string& figure) {
  if (figure == "intra_node_bus_bandwidth") return p.intra_node_bus_bandwidth;
  if (figure == "network_bus_bandwidth") return p.network_bus_bandwidth;
  if (figure == "nvls_efficiency") return p.nvls_efficiency;
  if (figure == "matmul_efficiency") return table_json(p.matmul_efficiency);
  if (figure == "attention_efficiency") return table_json(p.attention_efficiency);
  if (figure == "attention_backward_efficiency") return table_json(p.attention_backward_efficiency);
  if (figure == "vector_efficiency") return table_json(p.vector_efficiency);
  if (figure == "memory_efficiency") return table_json(p.memory_efficiency);
  if (figure == "norm_memory_efficiency") return p.norm_memory_efficiency;
  if (figure == "convert_memory_factor") return p.convert_memory_factor;
  if (figure == "kernel_gap_s") return p.kernel_gap_s;  // NOTE [Direct samples]
  if (figure == "eager_dispatch_s") return p.eager_dispatch_s;
  if (figure == "pinned_copy_bandwidth") return p.pinned_copy_bandwidth;
  if (figure == "pageable_copy_bandwidth") return p.pageable_copy_bandwidth;
  if (figure == "fsdp_hook_s") return p.fsdp_hook_s;
  if (figure == "fsdp_hook_param_s") return p.fsdp_hook_param_s;
  if (figure == "blas_workspace_bytes") return p.blas_workspace_bytes;
  FULLSHARD_CHECK(false, "calibrate fitted an unknown figure " + figure);
  return nullptr;
}

// NOTE [Fitted figures are checked]: a fit follows the samples wherever they lead: a kernel_gap
// sample of 5 s gives kernel_gap_s 5, a copy of 1e300 bytes in 1e-300 s an infinite bandwidth
// (written as null), and every scenario naming such a profile would fail to load. So the fitted
// profile goes through the figure readers a profile file goes through, and a figure outside its
// range is an error naming it, before anything is written (docs/history.md has the profile that
// was written before this check).
void check_fitted_profile(const json& out, const std::string& from) {
  HardwareProfile check;
  try {
    apply_hardware_figures(check, out, "");
    check_hardware_profile(check, "");
  } catch (const InputError& e) {
    const std::string what = e.what();
    std::string problem =
        what.size() > e.where().size() + 2 ? what.substr(e.where().size() + 2) : what;
    problem = problem.substr(0, problem.find("; "));
    throw InputError(
        "--output", "the fitted " + e.where() + " " + problem + " (fitted from " + from + ")",
        "check the samples behind " + e.where() +
            " (time_s in seconds, time_us in microseconds, bytes in bytes); nothing was written");
  }
}

bool is_csv_path(const std::string& s) {
  return s.size() > 4 && s.compare(s.size() - 4, 4, ".csv") == 0;
}

// One measurements file as calibration input. NOTE: a .csv becomes the same JSON
// (simulator/cost/calibration_csv.h), so both forms go through one validation; CSV errors name
// the line, and every error names the file.
struct MeasurementsFile {
  sim::CalibrationInput input;
  std::string profile;  // the file's "profile", if any
};

MeasurementsFile read_measurements(const std::string& path) {
  sim::CalibrationCsv csv;
  json j;
  if (is_csv_path(path)) {
    const std::string text = read_input_file(path, "a measurements .csv or .json file");
    try {
      csv = sim::parse_calibration_csv(text);
    } catch (const InputError& e) {
      throw InputError(path + ": " + e.where(), std::string(e.what()).substr(e.where().size() + 2),
                       "");
    }
    j = csv.measurements;
  } else {
    j = json_reader::read_json_file(path);
  }
  MeasurementsFile m;
  if (sim::parse_blas_workspace_measurement(j, m.input))
    return m;  // tools/measure/blas_workspace.py
  if (j.is_object() && j.contains("profile"))
    m.profile = json_reader::get_string(j.at("profile"), path + ": profile", "\"h100-sxm-80gb\"");
  try {
    m.input = sim::parse_calibration_input(j);
  } catch (const InputError& e) {
    const std::string where = is_csv_path(path) ? sim::csv_location(csv, e.where()) : e.where();
    throw InputError(path + ": " + where, std::string(e.what()).substr(e.where().size() + 2), "");
  }
  return m;
}

// A profile's identity: its file, or the name its aliases resolve to (`where` names it in an
// error).
std::string canonical_profile(const std::string& name, const std::string& where) {
  return is_json_path(name) ? fs::weakly_canonical(name).string()
                            : load_hardware_profile(name, where).name;
}

template <typename T>
void append(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// exp(RMS log error) - 1: a typical relative error.
std::string pct(double rms_log) { return fmt::format("{:.1f}%", 100 * (std::exp(rms_log) - 1)); }

}  // namespace

CLI::App* add_calibrate_command(CLI::App& app, CalibrateFlags& f) {
  auto* c = app.add_subcommand("calibrate",
                               "fit a hardware profile's time-model figures to measured timings");
  c->add_option(
       "measurements", f.measurements,
       "MEASUREMENTS.csv or .json, one or more: nccl-tests results, kernel timings, direct samples")
      ->required();
  c->add_option("--hardware", f.hardware,
                "profile name or .json path (default: the files' \"profile\")");
  c->add_option("-o,--output", f.output, "write the fitted profile to OUT.json");
  c->add_option("--exclude", f.exclude,
                "kernel classes left out of the fit: matmul, attention, attention_backward, norm, "
                "norm_backward, vector, convert (e.g. samples of another attention backend than "
                "the profile describes)");
  c->add_flag("--per-sample", f.per_sample,
              "list every kernel sample: measured time, predicted before and after the fit (which "
              "kernels the model "
              "under- or overprices)");
  return c;
}

int cmd_calibrate(const CalibrateFlags& f) {
  install_output_cleanup_on_signals();
  std::vector<std::string> inputs = f.measurements;
  if (is_json_path(f.hardware)) inputs.push_back(f.hardware);
  refuse_output_over_input("--output", f.output, inputs);
  if (!f.output.empty() && is_json_path(f.output)) check_output_writable("--output", f.output);
  // The profile to start from, and its file: --hardware's is loaded before the measurements are
  // read (a bad flag is reported first), else the files' "profile" after.
  std::string profile_path;
  HardwareProfile start;
  auto load = [&](const std::string& name, const std::string& where) {
    if (is_json_path(name)) {
      profile_path = name;
      start = load_hardware_profile_file(name);
    } else {
      start = load_hardware_profile(name, where);
      profile_path = (fs::path(hardware_profile_dir()) / (start.name + ".json")).string();
    }
  };
  if (!f.output.empty() && !is_json_path(f.output))
    throw InputError("--output", "is '" + f.output + "', not a .json path",
                     "write the fitted profile to a .json file");
  if (!f.hardware.empty()) load(f.hardware, "--hardware");
  sim::CalibrationInput input;
  std::string name = f.hardware, named_by;
  std::vector<std::string> file_names;
  for (const auto& path : f.measurements) {
    const MeasurementsFile m = read_measurements(path);
    append(input.collectives, m.input.collectives);
    append(input.kernels, m.input.kernels);
    append(input.direct, m.input.direct);
    if (m.input.blas_workspace_bytes > 0) input.blas_workspace_bytes = m.input.blas_workspace_bytes;
    file_names.push_back(fs::path(path).filename().string());
    if (f.hardware.empty() && !m.profile.empty()) {
      if (!name.empty() && canonical_profile(m.profile, path + ": profile") !=
                               canonical_profile(name, named_by + ": profile"))
        throw InputError(path + ": profile",
                         "is \"" + m.profile + "\" but " + named_by + " says \"" + name + "\"",
                         "calibrate one profile at a time, or name it with --hardware");
      name = m.profile, named_by = path;
    }
  }
  if (name.empty())
    throw InputError(
        "--hardware", "is missing",
        "name the profile to calibrate (--hardware h100) or give \"profile\" in the file");
  if (f.hardware.empty()) load(name, named_by + ": profile");
  std::string from;
  for (const auto& n : file_names) from += (from.empty() ? "" : ", ") + n;
  for (size_t i = 0; i < f.exclude.size(); ++i)
    from += (i == 0 ? " without its " : ", ") + f.exclude[i] +
            (i + 1 == f.exclude.size() ? " samples" : "");
  for (const auto& x : f.exclude) {
    static const std::vector<std::string> kClasses = {
        "matmul", "attention", "attention_backward", "norm", "norm_backward", "vector", "convert"};
    if (std::find(kClasses.begin(), kClasses.end(), x) == kClasses.end())
      throw InputError("--exclude", "is '" + printable(x) + "', not a kernel class",
                       "name matmul, attention, attention_backward, norm, norm_backward, vector "
                       "or convert");
  }
  size_t excluded = 0;
  if (!f.exclude.empty()) {
    const size_t before = input.kernels.size();
    std::erase_if(input.kernels, [&](const sim::KernelSample& k) {
      return std::find(f.exclude.begin(), f.exclude.end(), sim::kernel_class_name(k)) !=
             f.exclude.end();
    });
    excluded = before - input.kernels.size();
  }
  const sim::Calibration c = sim::calibrate(start, input);
  fmt::print("calibrated {} from {}: {} collective and {} kernel samples{}\n",
             printable(start.name), printable(from), input.collectives.size(), input.kernels.size(),
             input.direct.empty()
                 ? ""
                 : fmt::format(", {} direct (NOTE [Direct samples])", input.direct.size()));
  if (excluded > 0) fmt::print("  {} kernel samples of the --exclude classes left out\n", excluded);
  if (!input.collectives.empty())
    fmt::print("  collectives: typical error {} before, {} after\n", pct(c.collective_error_before),
               pct(c.collective_error_after));
  if (!input.kernels.empty())
    fmt::print("  kernels: typical error {} before, {} after\n", pct(c.kernel_error_before),
               pct(c.kernel_error_after));
  for (const auto& k : c.kernel_classes)
    fmt::print("    {}: {} samples, typical error {} before, {} after\n", k.name, k.samples,
               pct(k.before), pct(k.after));
  if (f.per_sample) {
    fmt::print("  per sample (predicted / measured, before -> after):\n");
    for (const auto& k : input.kernels) {
      const double before = sim::predict(start, k), after = sim::predict(c.profile, k);
      fmt::print("    {:<18} {:>10.2f} us  {:>6.2f}x -> {:>6.2f}x  {:.3g} FLOP, {:.3g} B{}\n",
                 sim::kernel_class_name(k), k.time_s * 1e6, before / k.time_s, after / k.time_s,
                 k.flops, k.bytes,
                 sim::launch_bound(k, input) ? "  (launch-bound: not fitted)" : "");
    }
  }
  if (c.launch_bound_samples > 0)
    fmt::print(
        "  {} kernel samples left out: no longer than the host's launch of one eager op, they "
        "timed the host "
        "(NOTE [Launch-bound samples])\n",
        c.launch_bound_samples);
  if (c.kernel_gap_launch_bound)
    fmt::print(
        "  kernel_gap not fitted: its sample is the host's launch rate, not the device's gap (NOTE "
        "[Launch-bound "
        "samples]); kept at {}\n",
        figure_json(c.profile, "kernel_gap_s").dump());
  for (const auto& fig : c.fitted)
    fmt::print("  {}: {} -> {}\n", fig, figure_json(start, fig).dump(),
               figure_json(c.profile, fig).dump());
  if (c.fitted.empty()) fmt::print("  nothing to fit (no samples)\n");
  if (f.output.empty()) return 0;

  // The fitted profile: the original file with the fitted figures and their sources replaced.
  json out = json_reader::read_json_file(profile_path);
  out["name"] = fs::path(f.output).stem().string();
  out["aliases"] = json::array();
  out["description"] = "calibrated from " + from + ": " + out.value("description", start.name);
  for (const auto& fig : c.fitted) {
    out[fig] = figure_json(c.profile, fig);
    out["sources"][fig] = fmt::format(
        "fitted by fullshard calibrate from {} ({} collective / {} kernel / {} direct samples; "
        "typical error {} "
        "-> {} collectives, {} -> {} kernels)",
        from, input.collectives.size(), input.kernels.size(), input.direct.size(),
        pct(c.collective_error_before), pct(c.collective_error_after), pct(c.kernel_error_before),
        pct(c.kernel_error_after));
  }
  check_fitted_profile(out, from);
  write_output_file(f.output, out.dump(2) + "\n", "--output");
  fmt::print("  fitted profile written to {} (use it as \"hardware\": {{\"profile\": \"{}\"}})\n",
             printable(f.output), printable(f.output));
  return 0;
}

}  // namespace fullshard::cli
