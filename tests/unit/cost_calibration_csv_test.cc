// Calibration measurements as CSV: the same samples as the JSON form, errors naming the line.
#include <gtest/gtest.h>

#include "core/common/error.h"
#include "simulator/cost/calibrate.h"
#include "simulator/cost/calibration_csv.h"

using namespace fullshard;
using namespace fullshard::sim;

TEST(CalibrationCsv, RowsBecomeTheJsonSamples) {
  const std::string text =
      "# nccl-tests on one node, and two kernels\n"
      "collective,nodes,gpus_per_node,bytes,time_us,busbw_gbs,op,dtype,flops,time_s\n"
      "all_gather,1,8,1073741824,,362.4,,,,\n"
      "\n"
      "all_reduce,2,8,268435456,1581.0,,,,,\n"
      ",,,130000000,,,matmul,bf16,962e9,0.00121\n";
  const CalibrationCsv csv = parse_calibration_csv(text);
  ASSERT_EQ(csv.measurements["collectives"].size(), 2u);
  ASSERT_EQ(csv.measurements["kernels"].size(), 1u);
  EXPECT_EQ(csv.collective_lines, (std::vector<int>{3, 5}));
  EXPECT_EQ(csv.kernel_lines, (std::vector<int>{6}));
  const nlohmann::json& k = csv.measurements["kernels"][0];
  EXPECT_EQ(k["op"], "matmul");
  EXPECT_DOUBLE_EQ(k["flops"].get<double>(), 962e9);
  EXPECT_FALSE(csv.measurements["collectives"][0].contains("time_us"));  // empty cell: absent
  // The same validation and samples as the JSON form.
  const CalibrationInput in = parse_calibration_input(csv.measurements);
  ASSERT_EQ(in.collectives.size(), 2u);
  EXPECT_EQ(in.collectives[1].nodes, 2);
  EXPECT_DOUBLE_EQ(in.collectives[1].time_s, 1581.0e-6);
  ASSERT_EQ(in.kernels.size(), 1u);
  EXPECT_DOUBLE_EQ(in.kernels[0].time_s, 0.00121);
}

TEST(CalibrationCsv, ErrorsNameTheLine) {
  auto where = [](const std::string& text) {
    try {
      parse_calibration_csv(text);
    } catch (const InputError& e) {
      return e.where();
    }
    return std::string("no error");
  };
  EXPECT_EQ(where("collective,bytes,colour\n"), "line 1");
  EXPECT_EQ(where("collective,bytes\nall_gather,1,2\n"), "line 2");
  EXPECT_EQ(where("collective,op,bytes\nall_gather,matmul,1\n"), "line 2");
  EXPECT_EQ(where("collective,op,bytes\n,,1\n"), "line 2");
  EXPECT_EQ(where("collective,bytes,flops\nall_gather,1,5\n"), "line 2 column flops");
  // Field errors found by the JSON validation map back to their line.
  const CalibrationCsv csv =
      parse_calibration_csv("collective,bytes,time_us\n# c\nall_gather,-1,5\n");
  try {
    parse_calibration_input(csv.measurements);
    FAIL() << "negative bytes accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(csv_location(csv, e.where()), "line 3 (collectives[0].bytes)");
  }
}
