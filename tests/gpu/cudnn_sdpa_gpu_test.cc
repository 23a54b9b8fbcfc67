// cuDNN attention at the 1B benchmark's shape (scenarios/llama-1b-h100-bench.json: bf16, B 2,
// S 4096, heads 32/8, head_dim 64) on the GPU: forward and backward both run cuDNN, not the
// flash kernels; the backward's plan runs in the workspace block the model gives it, and its
// get_workspace_size() is that block to the byte (the fit of NOTE [cuDNN SDPA workspace]); and
// cuDNN's outputs agree with fullshard's flash kernels on the same inputs. Exit 77 (skipped)
// without a GPU; skipped in a build without cuDNN or with FULLSHARD_CUDNN_ATTENTION=off.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "core/runtime/cudnn_sdpa_workspace.h"
#include "tests/gpu/kernel_compare.h"

namespace {

using namespace fullshard;
using kt::HT;
namespace cs = fullshard::cuda::cudnn_sdpa;

// A host tensor (its meta for the OpCall, its values to compare) and its device copy.
struct DevTensor {
  HT h;
  void* d = nullptr;
  explicit DevTensor(HT t, bool copy) : h(std::move(t)) {
    EXPECT_EQ(cudaMalloc(&d, h.meta.nbytes()), cudaSuccess);
    if (copy) {
      cudaMemcpy(d, h.data(), h.meta.nbytes(), cudaMemcpyHostToDevice);
    } else {
      cudaMemset(d, 0xff, h.meta.nbytes());  // NaN until written
    }
  }
  ~DevTensor() { cudaFree(d); }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  HT back() {
    HT g = h;
    cudaMemcpy(g.data(), d, h.meta.nbytes(), cudaMemcpyDeviceToHost);
    return g;
  }
};

void launch(OpKind k, const std::vector<DevTensor*>& in, const std::vector<DevTensor*>& out,
            const std::vector<int64_t>& args) {
  std::vector<HT*> hi, ho;
  std::vector<void*> gi, go;
  for (DevTensor* t : in) hi.push_back(&t->h), gi.push_back(t->d);
  for (DevTensor* t : out) ho.push_back(&t->h), go.push_back(t->d);
  const OpCall op = kt::make_call(k, hi, ho, args);
  cuda::KernelContext ctx{kc::dev().stream, kc::dev().lt, kc::dev().ws, kc::dev().ws_bytes};
  cuda::launch_kernel(op, gi, go, ctx);
  ASSERT_EQ(cudaStreamSynchronize(kc::dev().stream), cudaSuccess);
}

int64_t count_of(const std::vector<std::pair<std::string, int64_t>>& c, const std::string& path) {
  for (const auto& [p, n] : c)
    if (p == path) return n;
  return 0;
}

double largest(const HT& t) {
  double m = 0;
  for (double v : t.values()) m = std::max(m, std::abs(v));
  return m;
}

TEST(CudnnSdpaGpu, BothDirectionsRunAtTheBenchmarkShapeInTheModelsWorkspace) {
  if (!cs::built_with_cudnn())
    GTEST_SKIP() << "built without cuDNN (tools/deps.sh fetches its frontend)";
  if (const char* e = std::getenv("FULLSHARD_CUDNN_ATTENTION");
      e != nullptr && std::string(e) == "off")
    GTEST_SKIP() << "FULLSHARD_CUDNN_ATTENTION=off";
  const int64_t B = 2, S = 4096, H = 32, Hkv = 8, hd = 64, D = H * hd, Dkv = Hkv * hd,
                sr = (S + 127) / 128 * 128;
  const DType dt = DType::kBFloat16;
  const std::vector<int64_t> args = {B, S, H, Hkv, hd, 0, S};
  std::mt19937 rng(5);
  DevTensor q(kt::random_tensor(dt, {B, S, D}, rng, -2, 2), true),
      k(kt::random_tensor(dt, {B, S, Dkv}, rng, -2, 2), true),
      v(kt::random_tensor(dt, {B, S, Dkv}, rng), true),
      dout(kt::random_tensor(dt, {B, S, H, hd}, rng), true);
  DevTensor o(HT(dt, {B, S, H, hd}), false), lse(HT(DType::kFloat32, {B, H, S}), false);
  DevTensor o_ref(HT(dt, {B, S, H, hd}), false), lse_ref(HT(DType::kFloat32, {B, H, S}), false);
  const CudnnSdpaWorkspace model = cudnn_sdpa_workspace(true, B, S, H, hd);
  DevTensor dq(HT(dt, {B * S, D}), false), dk(HT(dt, {B * S, Dkv}), false),
      dv(HT(dt, {B * S, Dkv}), false), ws(HT(DType::kFloat32, {model.total() / 4}), false);
  DevTensor dq_ref(HT(dt, {B * S, D}), false), dk_ref(HT(dt, {B * S, Dkv}), false),
      dv_ref(HT(dt, {B * S, Dkv}), false), sd(HT(DType::kFloat32, {B, H, sr}), false),
      acc(HT(DType::kFloat32, {B, sr, H, (hd + 31) / 32 * 32}), false),
      dke(HT(dt, {B, S, H, hd}), false), dve(HT(dt, {B, S, H, hd}), false);

  const auto before = cs::path_counts();
  launch(OpKind::kAttentionCudnn, {&q, &k, &v}, {&o, &lse}, args);
  launch(OpKind::kAttentionCudnnBackward, {&dout, &q, &k, &v, &o, &lse}, {&dq, &dk, &dv, &ws},
         args);
  const auto after = cs::path_counts();
  for (const std::string& line : cs::plans()) std::printf("  cuDNN plan: %s\n", line.c_str());
  for (const auto& [path, n] : after)
    std::printf("  attention path: %s: %lld\n", path.c_str(), static_cast<long long>(n));
  EXPECT_EQ(count_of(after, "cudnn forward") - count_of(before, "cudnn forward"), 1)
      << "see the lines above";
  EXPECT_EQ(count_of(after, "cudnn backward") - count_of(before, "cudnn backward"), 1)
      << "see the lines above";
  for (const auto& [path, n] : after) EXPECT_EQ(path.rfind("flash ", 0), std::string::npos) << path;

  // The backward's plan asks exactly the model's block (PyTorch allocates get_workspace_size()).
  const std::string want = "model workspace " + std::to_string(model.total()) + " B: ";
  const std::string asks = ", workspace " + std::to_string(model.total()) + " B (frontend " +
                           std::to_string(model.frontend) + ")";
  bool found = false;
  for (const std::string& line : cs::plans())
    if (line.rfind("backward", 0) == 0 && line.find(want) != std::string::npos) {
      found = true;
      EXPECT_NE(line.find(asks), std::string::npos)
          << "the fit of NOTE [cuDNN SDPA workspace] is off: " << line;
    }
  EXPECT_TRUE(found) << "no backward plan with the model's workspace " << model.total();

  // The same problem through the flash kernels: cuDNN's outputs agree.
  launch(OpKind::kAttention, {&q, &k, &v}, {&o_ref, &lse_ref}, {B, S, H, Hkv, hd, 0});
  launch(OpKind::kAttentionBackward, {&dout, &q, &k, &v, &o_ref, &lse_ref},
         {&dq_ref, &dk_ref, &dv_ref, &sd, &acc, &dke, &dve}, {B, S, H, Hkv, hd, 0});
  const std::vector<std::pair<DevTensor*, DevTensor*>> pairs = {
      {&o, &o_ref}, {&lse, &lse_ref}, {&dq, &dq_ref}, {&dk, &dk_ref}, {&dv, &dv_ref}};
  const char* names[] = {"O", "logsumexp", "dq", "dk", "dv"};
  for (size_t i = 0; i < pairs.size(); ++i) {
    const HT got = pairs[i].first->back(), ref = pairs[i].second->back();
    kc::expect_close(got, ref, 2e-2 * largest(ref), 0, std::string("cuDNN vs flash ") + names[i]);
  }
}

}  // namespace

int main(int argc, char** argv) { return kc::run_gpu_tests(argc, argv, "cudnn_sdpa_gpu_test"); }
