#pragma once
// What kind of binary this is (NOTE [Host-tuned builds] in CMakeLists.txt): version, build type,
// portable or host-tuned, CUDA backend or not. Printed by `fullshard --version` and written
// into measured reports.
#include <string>

namespace fullshard {

struct BuildInfo {
  std::string version;     // "0.1.0"
  std::string build_type;  // CMake's: "Release", "RelWithDebInfo", ...
  bool native = false;     // built with -march=native (FULLSHARD_NATIVE)
  bool cuda = false;       // the CUDA + NCCL backend is compiled in
};

BuildInfo build_info();
// "fullshard 0.1.0 (Release, portable x86-64 code, CUDA backend)".
std::string build_description();

}  // namespace fullshard
