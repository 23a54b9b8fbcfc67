// Calibration from direct samples (NOTE [Direct samples] in simulator/cost/calibrate.h): what
// tools/measure/measure.py reads off directly (kernel gap, eager op, host copies) becomes the
// profile's figure as the median of its samples, before the kernel tables are fitted.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "simulator/cost/calibrate.h"

namespace fullshard::sim {
namespace {

using nlohmann::json;

TEST(CalibrateDirect, ParsesDirectRowsApartFromKernels) {
  const CalibrationInput in = parse_calibration_input(json::parse(R"({"kernels": [
    {"op": "kernel_gap", "time_s": 2.1e-6},
    {"op": "eager_op", "dtype": "bf16", "time_s": 1.2e-5},
    {"op": "copy_pinned", "bytes": 1e9, "time_s": 0.02},
    {"op": "copy_pageable", "bytes": 1e9, "time_s": 0.05},
    {"op": "vector", "bytes": 1e9, "time_s": 0.0004}
  ]})"));
  ASSERT_EQ(in.direct.size(), 4u);
  ASSERT_EQ(in.kernels.size(), 1u);
  EXPECT_EQ(in.direct[0].figure, DirectFigure::kKernelGap);
  EXPECT_EQ(in.direct[2].figure, DirectFigure::kCopyPinned);
  EXPECT_DOUBLE_EQ(in.direct[2].bytes, 1e9);

  auto bad = [](const char* text, const std::string& where) {
    try {
      parse_calibration_input(json::parse(text));
      ADD_FAILURE() << "expected an error at " << where;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), where) << e.what();
    }
  };
  bad(R"({"kernels": [{"op": "copy_pinned", "time_s": 0.02}]})", "kernels[0].bytes");
  bad(R"({"kernels": [{"op": "kernel_gap", "time_s": 0}]})", "kernels[0].time_s");
  bad(R"({"kernels": [{"op": "kernel_gap"}]})", "kernels[0].time_s");
}

TEST(CalibrateDirect, SetsEachFigureToItsMedian) {
  const HardwareProfile stock = load_hardware_profile("h100");
  CalibrationInput in;
  for (double t : {3e-6, 1e-6, 2e-6}) in.direct.push_back({DirectFigure::kKernelGap, 0, t});
  for (double t : {9e-6, 12e-6}) in.direct.push_back({DirectFigure::kEagerOp, 0, t});
  in.direct.push_back({DirectFigure::kCopyPinned, 1e9, 0.02});
  const Calibration c = calibrate(stock, in);
  EXPECT_DOUBLE_EQ(c.profile.kernel_gap_s, 2e-6);
  // The host time of an eager op is dispatch + launch: the launch overhead is taken off.
  EXPECT_DOUBLE_EQ(c.profile.eager_dispatch_s, 10.5e-6 - stock.launch_overhead_s);
  EXPECT_DOUBLE_EQ(c.profile.pinned_copy_bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(c.profile.pageable_copy_bandwidth, stock.pageable_copy_bandwidth);  // no samples
  EXPECT_EQ(c.fitted, (std::vector<std::string>{"kernel_gap_s", "eager_dispatch_s",
                                                "pinned_copy_bandwidth"}));
}

// Fused-norm samples (NOTE [Fused norm kernels]) set norm_memory_efficiency to the median of
// bytes / ((time - kernels x gap) x hbm_bandwidth), the backward counting two kernels, and stay
// out of the memory table.
TEST(CalibrateDirect, NormSamplesSetTheNormEfficiency) {
  const HardwareProfile stock = load_hardware_profile("h100");
  const double hbm = stock.hbm_bandwidth, gap = stock.kernel_gap_s;
  const CalibrationInput in = parse_calibration_input(
      json{{"kernels",
            {{{"op", "norm"}, {"bytes", 1e8}, {"time_s", 1e8 / (hbm * 0.3) + gap}},
             {{"op", "norm_backward"}, {"bytes", 2e8}, {"time_s", 2e8 / (hbm * 0.5) + 2 * gap}},
             {{"op", "norm"}, {"bytes", 4e8}, {"time_s", 4e8 / (hbm * 0.45) + gap}}}}});
  ASSERT_EQ(in.kernels.size(), 3u);
  EXPECT_TRUE(in.kernels[1].norm && in.kernels[1].backward);
  const Calibration c = calibrate(stock, in);
  EXPECT_NEAR(c.profile.norm_memory_efficiency, 0.45, 1e-9);
  EXPECT_EQ(c.fitted, (std::vector<std::string>{"norm_memory_efficiency"}));
  EXPECT_EQ(c.profile.memory_efficiency.rows, stock.memory_efficiency.rows);
  // Predicted with the fitted figure, the middle sample is exact.
  EXPECT_NEAR(predict(c.profile, in.kernels[2]), 4e8 / (hbm * 0.45) + gap, 1e-12);
  try {
    parse_calibration_input(
        json::parse(R"({"kernels": [{"op": "norm", "flops": 1e6, "time_s": 1e-5}]})"));
    ADD_FAILURE() << "a norm sample without bytes must be refused";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "kernels[0]") << e.what();
  }
}

// The fitted kernel gap is what the kernel tables see: a GEMM sample's efficiency is computed
// on its time less the measured gap, so a profile built from samples with a known gap is
// recovered exactly whatever that gap is.
RC_GTEST_PROP(CalibrateDirect, KernelGapIsTakenOffKernelSamples, ()) {
  HardwareProfile truth = load_hardware_profile("h100");
  truth.matmul_efficiency.rows = {{0, *rc::gen::inRange(20, 95) / 100.0}};
  truth.kernel_gap_s = *rc::gen::inRange(0, 20) * 1e-6;
  HardwareProfile stock = truth;
  stock.matmul_efficiency.rows = {{0, 0.5}};
  stock.kernel_gap_s = 7e-6;
  CalibrationInput in;
  in.direct.push_back({DirectFigure::kKernelGap, 0, std::max(truth.kernel_gap_s, 1e-9)});
  truth.kernel_gap_s = in.direct[0].time_s;
  KernelSample k{OpClass::kMatmul,
                 false,
                 DType::kBFloat16,
                 {8192, 8192, 8192},
                 2.0 * 8192 * 8192 * 8192,
                 4e8,
                 0};
  k.time_s = predict(truth, k);
  in.kernels.push_back(k);
  const Calibration c = calibrate(stock, in);
  RC_ASSERT(c.profile.kernel_gap_s == truth.kernel_gap_s);
  RC_ASSERT(std::abs(c.profile.matmul_efficiency.at(1e12) / truth.matmul_efficiency.at(1e12) - 1) <
            1e-9);
}

// FSDP2 hook samples (tools/measure/fsdp_hooks.py) are a line in the unit's parameter count:
// samples drawn from any line a + b x params (a, b >= 0) over two or more counts give a and b
// back; samples of one count fit a alone and keep the profile's b.
RC_GTEST_PROP(CalibrateDirect, FsdpHookSamplesFitTheirLine, ()) {
  const HardwareProfile stock = load_hardware_profile("h100");
  const double a = *rc::gen::inRange(1, 2000) * 1e-6, b = *rc::gen::inRange(0, 100) * 1e-7;
  const auto counts = *rc::gen::nonEmpty(
      rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(1, 64)));
  json rows = json::array();
  for (int64_t n : counts)
    rows.push_back(
        {{"op", "fsdp_hook"}, {"params", n}, {"time_s", a + b * static_cast<double>(n)}});
  const CalibrationInput in = parse_calibration_input(json{{"kernels", rows}});
  RC_ASSERT(in.direct.size() == counts.size());
  RC_ASSERT(in.kernels.empty());
  const Calibration c = calibrate(stock, in);
  const bool one_count =
      std::all_of(counts.begin(), counts.end(), [&](int64_t n) { return n == counts[0]; });
  if (one_count) {
    RC_ASSERT(c.fitted == std::vector<std::string>{"fsdp_hook_s"});
    RC_ASSERT(c.profile.fsdp_hook_param_s == stock.fsdp_hook_param_s);
    const double expected =
        std::max(0.0, a + (b - stock.fsdp_hook_param_s) * static_cast<double>(counts[0]));
    RC_ASSERT(std::abs(c.profile.fsdp_hook_s - expected) < 1e-12);
  } else {
    RC_ASSERT(c.fitted == (std::vector<std::string>{"fsdp_hook_s", "fsdp_hook_param_s"}));
    RC_ASSERT(std::abs(c.profile.fsdp_hook_s - a) < 1e-9);
    RC_ASSERT(std::abs(c.profile.fsdp_hook_param_s - b) < 1e-12);
  }
  // Nothing else moves.
  RC_ASSERT(c.profile.kernel_gap_s == stock.kernel_gap_s);
  RC_ASSERT(c.profile.eager_dispatch_s == stock.eager_dispatch_s);
}

TEST(CalibrateDirect, FsdpHookRowsNeedTheirParameterCount) {
  auto where = [](const char* text) -> std::string {
    try {
      parse_calibration_input(json::parse(text));
    } catch (const InputError& e) {
      return e.where();
    }
    return "accepted";
  };
  EXPECT_EQ(where(R"({"kernels": [{"op": "fsdp_hook", "time_s": 1e-4}]})"), "kernels[0].params");
  EXPECT_EQ(where(R"({"kernels": [{"op": "fsdp_hook", "params": -1, "time_s": 1e-4}]})"),
            "kernels[0].params");
  EXPECT_EQ(where(R"({"kernels": [{"op": "fsdp_hook", "params": 4, "time_s": 0}]})"),
            "kernels[0].time_s");
  EXPECT_EQ(where(R"({"kernels": [{"op": "vector", "params": 4, "bytes": 1e6, "time_s": 1e-4}]})"),
            "kernels[0].params");
  EXPECT_EQ(where(R"({"kernels": [{"op": "fsdp_hook", "params": 0, "time_s": 1e-4}]})"),
            "accepted");
}

}  // namespace
}  // namespace fullshard::sim
