// cuDNN attention's host side (backends/cuda/kernels/cudnn_sdpa.h), without a GPU: the graph's
// layouts address exactly the elements the flash kernels' index maps do (so cuDNN and the flash
// kernels read and write the same memory), the checks made before cuDNN is asked, the env
// switch, and, where the build has cuDNN, the frontend's own validation of the graphs fullshard
// builds for the shapes its models use.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "core/common/error.h"

namespace {

using namespace fullshard;
using namespace fullshard::cuda;
namespace cs = fullshard::cuda::cudnn_sdpa;

int64_t address(const cs::TensorLayout& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return t.offset + b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d * t.stride[3];
}

AttnLayout layout(int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t hd, bool packed, int64_t lse_ld) {
  AttnLayout l{};
  l.B = B, l.S = S, l.H = H, l.Hkv = Hkv, l.hd = hd, l.group = H / Hkv, l.lse_ld = lse_ld;
  const int64_t D = H * hd;
  l.q_ld = packed ? 3 * D : D;
  l.kv_ld = packed ? 3 * D : Hkv * hd;
  l.q_off = 0, l.k_off = packed ? D : 0, l.v_off = packed ? 2 * D : 0;
  l.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  return l;
}

RC_GTEST_PROP(CudnnSdpa, GraphLayoutAddressesWhatTheFlashKernelsDo, ()) {
  const bool packed = *rc::gen::arbitrary<bool>();
  const int64_t Hkv = *rc::gen::inRange<int64_t>(1, 5);
  const int64_t H = packed ? Hkv : Hkv * *rc::gen::inRange<int64_t>(1, 5);
  const int64_t B = *rc::gen::inRange<int64_t>(1, 4), S = *rc::gen::inRange<int64_t>(1, 40);
  const int64_t hd = 8 * *rc::gen::inRange<int64_t>(1, 5), lse_ld = S + *rc::gen::inRange<int64_t>(0, 40);
  const AttnLayout l = layout(B, S, H, Hkv, hd, packed, lse_ld);
  const cs::GraphLayout g = cs::graph_layout(l);
  RC_ASSERT((g.q.dim == std::array<int64_t, 4>{B, H, S, hd}));
  RC_ASSERT((g.k.dim == std::array<int64_t, 4>{B, Hkv, S, hd}));
  RC_ASSERT((g.stats.dim == std::array<int64_t, 4>{B, H, S, 1}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        RC_ASSERT(address(g.stats, b, h, s, 0) == attn_lse_index(l, b, h, s));
        for (int64_t d = 0; d < hd; ++d) {
          RC_ASSERT(address(g.q, b, h, s, d) == attn_q_index(l, b, s, h) + d);
          RC_ASSERT(address(g.o, b, h, s, d) == attn_o_index(l, b, s, h) + d);
          RC_ASSERT(address(g.dq, b, h, s, d) == attn_o_index(l, b, s, h) + d);  // dq: [B, S, H, hd]
        }
      }
      for (int64_t kvh = 0; kvh < Hkv; ++kvh)
        for (int64_t d = 0; d < hd; ++d) {
          RC_ASSERT(address(g.k, b, kvh, s, d) == attn_k_index(l, b, s, kvh) + d);
          RC_ASSERT(address(g.v, b, kvh, s, d) == attn_v_index(l, b, s, kvh) + d);
          RC_ASSERT(address(g.dkv, b, kvh, s, d) == ((b * S + s) * Hkv + kvh) * hd + d);  // dk, dv: [B, S, Hkv, hd]
        }
    }
}

TEST(CudnnSdpa, PrecheckSaysWhyBeforeCudnnIsAsked) {
  const AttnLayout l = layout(2, 64, 8, 2, 64, false, 64);
  alignas(16) static unsigned char buf[64];
  const void* ok = buf;
  const void* odd = buf + 2;
  EXPECT_EQ(cs::precheck(l, {DType::kBFloat16, DType::kBFloat16}, {ok, ok}), "");
  EXPECT_EQ(cs::precheck(l, {DType::kFloat16}, {ok}), "");
  EXPECT_NE(cs::precheck(l, {DType::kFloat32}, {ok}).find("bf16 or fp16, not fp32"), std::string::npos);
  EXPECT_NE(cs::precheck(l, {DType::kBFloat16, DType::kFloat32}, {ok}).find("share one dtype"), std::string::npos);
  EXPECT_NE(cs::precheck(l, {DType::kBFloat16}, {ok, odd}).find("16-byte aligned"), std::string::npos);
  EXPECT_NE(cs::precheck(layout(1, 8, 2, 2, 36, false, 8), {DType::kBFloat16}, {ok}).find("head_dim 36"),
            std::string::npos);
  EXPECT_NE(cs::precheck(layout(1, 8, 2, 2, 264, false, 8), {DType::kBFloat16}, {ok}).find("head_dim 264"),
            std::string::npos);
}

TEST(CudnnSdpa, EnvSwitchTakesAutoOrOff) {
  EXPECT_TRUE(cs::enabled_by_env(nullptr));
  EXPECT_TRUE(cs::enabled_by_env(""));
  EXPECT_TRUE(cs::enabled_by_env("auto"));
  EXPECT_FALSE(cs::enabled_by_env("off"));
  try {
    cs::enabled_by_env("of");
    FAIL() << "a typo must not pick a kernel";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("FULLSHARD_CUDNN_ATTENTION"), std::string::npos) << m;
    EXPECT_NE(m.find("'of'"), std::string::npos) << m;
  }
}

// The frontend's validate() checks dims, strides, dtypes and attributes on the host (for a given
// compute capability, so no device is asked). The shapes:
// the 1B benchmark's (GQA 32/8, head_dim 64, seq 4096), Llama 3 8B's (head_dim 128), GPT-2's
// packed q / k / v, a sequence that is no tile multiple.
TEST(CudnnSdpa, FrontendValidatesTheGraphs) {
  if (!cs::built_with_cudnn()) GTEST_SKIP() << "built without cuDNN (tools/deps.sh fetches its frontend)";
  const std::vector<AttnLayout> shapes = {layout(2, 4096, 32, 8, 64, false, 4096), layout(1, 8192, 32, 8, 128, false, 8192),
                                          layout(4, 1024, 12, 12, 64, true, 1024), layout(2, 37, 4, 2, 128, false, 37)};
  for (int sm : {80, 90})
    for (const AttnLayout& l : shapes)
      for (DType dt : {DType::kBFloat16, DType::kFloat16})
        for (bool backward : {false, true})
          EXPECT_EQ(cs::validate_graph(backward, dt, l, sm), "")
              << "sm_" << sm << (backward ? " backward" : " forward") << " S " << l.S << " heads " << l.H << "/" << l.Hkv
              << " hd " << l.hd;
  // And it does check: query heads that are no multiple of the kv heads, a head dim past cuDNN's,
  // rows whose stride is no 16-byte multiple.
  EXPECT_NE(cs::validate_graph(false, DType::kBFloat16, layout(1, 64, 6, 4, 64, false, 64), 90), "");
  EXPECT_NE(cs::validate_graph(true, DType::kBFloat16, layout(1, 64, 4, 4, 512, false, 64), 90), "");
  AttnLayout odd_rows = layout(1, 64, 4, 4, 64, false, 64);
  odd_rows.q_ld += 4;  // rows 8 bytes off a 16-byte multiple
  EXPECT_NE(cs::validate_graph(false, DType::kBFloat16, odd_rows, 90), "");
}

}  // namespace
