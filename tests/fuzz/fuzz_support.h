#pragma once
// Shared by the libFuzzer targets (tests/fuzz/*_fuzz.cc, NOTE [Fuzz targets] in
// tests/fuzz/CMakeLists.txt): an input is handled when it parses or is an InputError. Any other
// exception (InternalError: a FULLSHARD_CHECK reached from user input; nlohmann's exceptions
// escaping a parser) escapes LLVMFuzzerTestOneInput, and libFuzzer reports it as a crash with
// the input that caused it, as it does for what ASan and UBSan find.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/common/error.h"

namespace fullshard::fuzz {

template <class F>
void expect_parse_or_input_error(F&& f) {
  try {
    f();
  } catch (const InputError&) {}
}

inline std::string text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A path whose content is `bytes`, for parsers that read files: a memfd (a regular file, so
// read_input_file accepts it) rewritten for every input.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("fullshard-fuzz", 0)) {}
  std::string write(const uint8_t* data, size_t size) {
    (void)ftruncate(fd_, 0);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

}  // namespace fullshard::fuzz
