// Fuzz target: calibration measurements as CSV (`fullshard calibrate M.csv`): the CSV reader,
// then the same validation as JSON measurements.
#include "simulator/cost/calibrate.h"
#include "simulator/cost/calibration_csv.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  fuzz::expect_parse_or_input_error([&] {
    const sim::CalibrationCsv csv = sim::parse_calibration_csv(fuzz::text(data, size));
    sim::parse_calibration_input(csv.measurements);
  });
  return 0;
}
