// Host-only test of CudaBackend: runs on every machine, GPU or not. CUDA_VISIBLE_DEVICES=-1 is
// set before the first CUDA call of the process, so the runtime sees no device even where one
// is installed: the backend must refuse with an InputError that names the fix.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "core/common/error.h"

namespace fullshard::cuda {
namespace {

TEST(CudaBackendHost, NoGpuVisible) { EXPECT_EQ(visible_gpu_count(), 0); }

TEST(CudaBackendHost, ConstructionWithoutGpuThrowsInputErrorNamingTheFix) {
  CudaBackendOptions o;
  o.rank = 0;
  o.world_size = 1;
  try {
    CudaBackend b(std::move(o));
    FAIL() << "a CudaBackend was constructed with no GPU visible";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.where(), "--backend cuda");
    EXPECT_NE(what.find("no GPU visible"), std::string::npos) << what;
    EXPECT_NE(what.find("--backend cpu"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace fullshard::cuda

int main(int argc, char** argv) {
  // Before any CUDA call: the runtime reads it once, at initialisation.
  setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
