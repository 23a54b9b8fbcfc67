#pragma once
// A fresh directory under $TMPDIR for one test, removed with everything in it when the test ends.
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "core/common/error.h"

namespace fullshard::testing {

class TempDir {
 public:
  // `stem` names the tests the directory belongs to ("fullshard-<stem>-XXXXXX").
  explicit TempDir(const std::string& stem = "test") {
    std::string t =
        (std::filesystem::temp_directory_path() / ("fullshard-" + stem + "-XXXXXX")).string();
    const char* made = ::mkdtemp(t.data());
    FULLSHARD_CHECK(made != nullptr, "mkdtemp failed for " + t);
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

}  // namespace fullshard::testing
