#pragma once
// Writing a file the user named (a report, a fitted profile, a plot, a scenario) so that it is
// either complete or not there.
//
// NOTE [Atomic outputs]: writing in place loses data three ways: a full disk or a failed write
// leaves a truncated file (and, unchecked, exit 0); a kill or Ctrl-C mid-write leaves a 0-byte
// or cut file; and an output that is also an input (`simulate S.json --json S.json`) destroys
// the input. OutputFile writes to a temporary file in the same folder (same file system, so
// rename() is atomic), checks every write, fsync()s, and renames over the target only when
// everything succeeded. The temporary file is removed on any error, when the OutputFile is
// destroyed uncommitted (an exception), and on SIGINT/SIGTERM once
// install_output_cleanup_on_signals() ran. An existing target that is not a regular file
// (/dev/null, /dev/stdout, /dev/full, a FIFO) is written directly, with the same checks.
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace fullshard {

class OutputFile {
 public:
  // Opens the temporary file `.NAME.tmp-XXXXXX` beside `path`. `flag` names the option in
  // errors (e.g. "--json"). Throws InputError when the folder is missing or not writable or
  // `path` is a directory.
  OutputFile(std::string path, std::string flag);
  ~OutputFile();  // uncommitted: closes and removes the temporary file
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends `data`; throws InputError (with the system's reason, e.g. "No space left on
  // device") when the write fails.
  void write(std::string_view data);
  // A stream over the same file for writers that take std::ostream. Its failures are
  // reported by commit() (streams do not throw).
  std::ostream& stream();
  // Flushes, fsync()s, closes and renames the temporary file onto the path. Throws InputError
  // (and removes the temporary file) on any failure; afterwards the object is inert.
  void commit();

  const std::string& path() const { return path_; }

 private:
  class Buf;
  void fail(const std::string& what, int err);
  void discard() noexcept;

  std::string path_, flag_, tmp_,
      tmp_target_;  // tmp_target_: what the temporary file is renamed onto
  int fd_ = -1;
  int slot_ = -1;  // in the signal-cleanup registry
  bool direct_ = false;
  std::unique_ptr<Buf> buf_;
  std::unique_ptr<std::ostream> os_;
};

// Writes `text` to `path` through an OutputFile.
void write_output_file(const std::string& path, std::string_view text, const std::string& flag);

// Early check, before long work, without creating anything: the folder of `path` exists and
// is writable and `path` is not a directory. Throws InputError naming `flag`.
void check_output_writable(const std::string& flag, const std::string& path);

// Throws InputError naming `flag` when `output` is the same file as one of `inputs` (same
// device and inode when both exist, else the same canonical path). Empty names are skipped.
void refuse_output_over_input(const std::string& flag, const std::string& output,
                              const std::vector<std::string>& inputs);

// Installs SIGINT and SIGTERM handlers that remove every OutputFile's temporary file, then
// call the previous handler (or die of the signal as before). Idempotent.
void install_output_cleanup_on_signals();

}  // namespace fullshard
