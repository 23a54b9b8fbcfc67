#pragma once
// `fullshard calibrate MEASUREMENTS.csv|json... --hardware PROFILE [-o OUT.json]`: fits a
// hardware profile's time-model figures to measured nccl-tests results, kernel timings and
// direct samples, from one or more files taken together
// (simulator/cost/calibrate.h, docs/cost-model.md "Calibration") and writes the fitted profile.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fullshard::cli {

struct CalibrateFlags {
  // Each a .csv or a JSON {"profile"?, "collectives": [...], "kernels": [...]}; their samples
  // are fitted together.
  std::vector<std::string> measurements;
  std::string hardware;     // profile name or .json path (default: the file's "profile")
  std::string output;       // the fitted profile (.json); empty: print only
  bool per_sample = false;  // list every kernel sample: measured, predicted before and after
  std::vector<std::string> exclude;  // kernel classes left out of the fit (e.g. attention)
};

CLI::App* add_calibrate_command(CLI::App& app, CalibrateFlags& flags);
int cmd_calibrate(const CalibrateFlags& flags);

}  // namespace fullshard::cli
