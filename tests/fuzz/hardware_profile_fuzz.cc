// Fuzz target: a hardware profile file (load_hardware_profile_file, as `"hardware":
// {"profile": "my.json"}` or `calibrate --hardware my.json` reads it).
#include "core/scenario/hardware_profile.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  static fuzz::MemFile file;
  const std::string path = file.write(data, size);
  fuzz::expect_parse_or_input_error([&] { load_hardware_profile_file(path); });
  return 0;
}
