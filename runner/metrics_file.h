#pragma once
// The launcher's --metrics file: one JSON object per step (metrics_line_json).
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fullshard::runner {

// NOTE [Metrics file]: steps go to PATH.partial as they come (tail it to watch a run); the
// file takes its name only when the run ends well, so a failed run never replaces an earlier
// run's metrics, and an input file is never overwritten. An existing PATH that is not a regular
// file (/dev/stdout, a FIFO, a device) is written as it is, as OutputFile writes such outputs
// (NOTE [Atomic outputs]): renaming PATH.partial onto it would replace the node itself (as
// root, `--metrics /dev/full` left /dev/full a regular file holding the metrics).
class MetricsFile {
 public:
  // `path` empty: no file (write and finish do nothing). Throws InputError naming --metrics
  // when `path` is the scenario file `scenario_path`, a directory, or cannot be written.
  MetricsFile(const std::string& path, const std::string& scenario_path);
  bool is_open() const { return out_.is_open(); }
  // Where the lines go now: PATH.partial, or PATH itself when it is not a regular file.
  const std::string& writing_path() const { return writing_; }
  // Appends `line` and flushes; false when the write failed (a full disk, an I/O error).
  bool write(const nlohmann::json& line);
  // Closes the file. When `run_ok`, PATH.partial becomes PATH; returns a line for the user
  // when it did not (`*rename_failed` set when the rename itself failed), "" otherwise.
  std::string finish(bool run_ok, bool* rename_failed);

 private:
  std::string path_;
  std::string writing_;
  bool direct_ = false;
  std::ofstream out_;
};

}  // namespace fullshard::runner
