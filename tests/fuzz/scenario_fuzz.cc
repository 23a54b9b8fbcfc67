// Fuzz target: a scenario file, as `fullshard simulate S.json` reads it (read_json_file +
// parse_scenario). Paths it names resolve in the current directory.
#include "core/scenario/json_reader.h"
#include "core/scenario/scenario.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  static fuzz::MemFile file;
  const std::string path = file.write(data, size);
  fuzz::expect_parse_or_input_error(
      [&] { parse_scenario(json_reader::read_json_file(path), "."); });
  return 0;
}
