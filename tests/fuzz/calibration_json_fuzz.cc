// Fuzz target: calibration measurements as JSON (`fullshard calibrate M.json`).
#include "core/common/json_file.h"
#include "simulator/cost/calibrate.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  fuzz::expect_parse_or_input_error(
      [&] { sim::parse_calibration_input(parse_json_text(fuzz::text(data, size), "m.json")); });
  return 0;
}
