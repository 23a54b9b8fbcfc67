#include "runner/metrics_file.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard::runner {

MetricsFile::MetricsFile(const std::string& path, const std::string& scenario_path) : path_(path) {
  if (path.empty()) return;
  std::error_code ec;
  direct_ = std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec);
  writing_ = direct_ ? path : path + ".partial";
  if (std::filesystem::equivalent(path, scenario_path, ec))
    throw InputError("--metrics", "is the scenario file '" + path + "'",
                     "write the metrics to another file");
  if (std::filesystem::is_directory(path, ec))
    throw InputError("--metrics", "'" + path + "' is a directory", "give a file path inside it");
  out_.open(writing_, direct_ ? std::ios::out : std::ios::trunc);
  if (!out_)
    throw InputError("--metrics", "cannot write '" + writing_ + "'", "give a writable file path");
}

bool MetricsFile::write(const nlohmann::json& line) {
  if (!out_.is_open()) return true;
  out_ << line.dump() << "\n";
  out_.flush();
  return static_cast<bool>(out_);
}

std::string MetricsFile::finish(bool run_ok, bool* rename_failed) {
  *rename_failed = false;
  if (!out_.is_open()) return "";
  out_.close();
  if (direct_) return "";  // written where it goes (a failed write was reported when it happened)
  if (run_ok) {
    std::error_code ec;
    std::filesystem::rename(writing_, path_, ec);
    if (!ec) return "";
    *rename_failed = true;
    return fmt::format("launcher: cannot rename '{}' to '{}': {}", writing_, path_, ec.message());
  }
  return fmt::format("launcher: the metrics of this run are in '{}'", writing_);
}

}  // namespace fullshard::runner
