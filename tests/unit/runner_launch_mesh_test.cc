// The launcher's mesh checks per backend (runner/launcher.cc, validate_launch): the shipped pp and
// cp scenarios launch on the CPU and CUDA backends (the CUDA backend's transfers and ring-attention
// kernels are built: docs/pipeline.md, docs/context-parallel.md), and a backend without them is
// refused in one line naming fsdp.mesh.dim_names, the dim and its size.
#include <gtest/gtest.h>

#include <string>

#include "core/scenario/scenario.h"
#include "runner/launcher.h"
#include "tests/support/input_error.h"

namespace fullshard {
namespace {

using testing::input_error_of;

TEST(LaunchMesh, PipelineAndContextParallelLaunchOnCpuAndCudaOnly) {
  const runner::LaunchOptions lo;
  const runner::BackendKind cpu{"cpu", "", nullptr, nullptr, nullptr},
      cuda{"cuda", "", nullptr, nullptr, nullptr}, other{"other", "", nullptr, nullptr, nullptr};
  const std::string root = std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/";
  for (const auto& [file, dim] : {std::pair{"tiny-llama-pp2-fsdp2-cpu4.json", "pp"},
                                  std::pair{"tiny-llama-cp2-cpu4.json", "cp"}}) {
    SCOPED_TRACE(file);
    const Scenario s = load_scenario_file(root + file);
    EXPECT_EQ(input_error_of([&] { runner::validate_launch(lo, s, cpu); }), "");
    EXPECT_EQ(input_error_of([&] { runner::validate_launch(lo, s, cuda); }), "");
    const std::string e = input_error_of([&] { runner::validate_launch(lo, s, other); });
    EXPECT_NE(e.find("fsdp.mesh.dim_names"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("has a ") + dim + " dim of size 2: the other backend"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fullshard
