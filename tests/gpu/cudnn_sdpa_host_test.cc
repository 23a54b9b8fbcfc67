// cuDNN attention's host side (backends/cuda/kernels/cudnn_sdpa.h), without a GPU: the graph's
// layouts address exactly the elements the flash kernels' index maps do (so cuDNN and the flash
// kernels read and write the same memory), the checks made before cuDNN is asked, the env
// switch, the plan choice against the model's workspace (cudnn_sdpa_choice.h) and the path
// counter, and, where the build has cuDNN, the frontend's own validation of the graphs fullshard
// builds for the shapes its models use.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "backends/cuda/kernels/cudnn_sdpa_choice.h"
#include "core/common/error.h"
#include "core/runtime/cudnn_sdpa_workspace.h"

namespace {

using namespace fullshard;
using namespace fullshard::cuda;
namespace cs = fullshard::cuda::cudnn_sdpa;

int64_t address(const cs::TensorLayout& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return t.offset + b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d * t.stride[3];
}

AttnLayout layout(int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t hd, bool packed,
                  int64_t lse_ld) {
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
  const int64_t hd = 8 * *rc::gen::inRange<int64_t>(1, 5),
                lse_ld = S + *rc::gen::inRange<int64_t>(0, 40);
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
          RC_ASSERT(address(g.dq, b, h, s, d) ==
                    attn_o_index(l, b, s, h) + d);  // dq: [B, S, H, hd]
        }
      }
      for (int64_t kvh = 0; kvh < Hkv; ++kvh)
        for (int64_t d = 0; d < hd; ++d) {
          RC_ASSERT(address(g.k, b, kvh, s, d) == attn_k_index(l, b, s, kvh) + d);
          RC_ASSERT(address(g.v, b, kvh, s, d) == attn_v_index(l, b, s, kvh) + d);
          RC_ASSERT(address(g.dkv, b, kvh, s, d) ==
                    ((b * S + s) * Hkv + kvh) * hd + d);  // dk, dv: [B, S, Hkv, hd]
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
  EXPECT_NE(cs::precheck(l, {DType::kFloat32}, {ok}).find("bf16 or fp16, not fp32"),
            std::string::npos);
  EXPECT_NE(cs::precheck(l, {DType::kBFloat16, DType::kFloat32}, {ok}).find("share one dtype"),
            std::string::npos);
  EXPECT_NE(cs::precheck(l, {DType::kBFloat16}, {ok, odd}).find("16-byte aligned"),
            std::string::npos);
  EXPECT_NE(
      cs::precheck(layout(1, 8, 2, 2, 36, false, 8), {DType::kBFloat16}, {ok}).find("head_dim 36"),
      std::string::npos);
  EXPECT_NE(cs::precheck(layout(1, 8, 2, 2, 264, false, 8), {DType::kBFloat16}, {ok})
                .find("head_dim 264"),
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
  if (!cs::built_with_cudnn())
    GTEST_SKIP() << "built without cuDNN (tools/deps.sh fetches its frontend)";
  const std::vector<AttnLayout> shapes = {
      layout(2, 4096, 32, 8, 64, false, 4096), layout(1, 8192, 32, 8, 128, false, 8192),
      layout(4, 1024, 12, 12, 64, true, 1024), layout(2, 37, 4, 2, 128, false, 37)};
  for (int sm : {80, 90})
    for (const AttnLayout& l : shapes)
      for (DType dt : {DType::kBFloat16, DType::kFloat16})
        for (bool backward : {false, true})
          EXPECT_EQ(cs::validate_graph(backward, dt, l, sm), "")
              << "sm_" << sm << (backward ? " backward" : " forward") << " S " << l.S << " heads "
              << l.H << "/" << l.Hkv << " hd " << l.hd;
  // And it does check: query heads that are no multiple of the kv heads, a head dim past cuDNN's,
  // rows whose stride is no 16-byte multiple.
  EXPECT_NE(cs::validate_graph(false, DType::kBFloat16, layout(1, 64, 6, 4, 64, false, 64), 90),
            "");
  EXPECT_NE(cs::validate_graph(true, DType::kBFloat16, layout(1, 64, 4, 4, 512, false, 64), 90),
            "");
  AttnLayout odd_rows = layout(1, 64, 4, 4, 64, false, 64);
  odd_rows.q_ld += 4;  // rows 8 bytes off a 16-byte multiple
  EXPECT_NE(cs::validate_graph(false, DType::kBFloat16, odd_rows, 90), "");
}

// The frontend as the H200 run saw it (NOTE [cuDNN SDPA workspace]), scaled to a shape: its node
// tensors (with the padding-mask workaround's B*8 bytes on a cuDNN <= 9.15 where S % 128 != 0)
// and the engine parts of the backward's three heuristic plans.
struct FrontendAsMeasured {
  int64_t frontend = 0;
  std::vector<int64_t> engines;
};
FrontendAsMeasured as_measured(int64_t B, int64_t S, int64_t H, int64_t hd, bool old_cudnn) {
  const int64_t rows = B * H * S;
  return {rows * (hd + 1) * 4 + (old_cudnn && S % 128 != 0 ? B * 8 : 0),
          {rows * hd * 4 + 256, 2 * rows * hd * 4 + 128, 2 * rows * hd * 4 + 128}};
}
// build_plan_at_index after deselect_workspace_greater_than(limit): an engine part above the
// limit fails with the frontend's message; a plan that builds asks its engine part + the
// frontend's.
std::function<cs::PlanOutcome(int64_t)> frontend_with_limit(const FrontendAsMeasured& f,
                                                            int64_t limit) {
  return [f, limit](int64_t i) {
    cs::PlanOutcome o;
    const int64_t e = f.engines.at(static_cast<size_t>(i));
    if (e > limit)
      o.failure = "[cudnn_frontend] Error: Skipping plan since workspace violation. Requires " +
                  std::to_string(e);
    else
      o.workspace = e + f.frontend;
    return o;
  };
}

// The rule the backend picks plans by (NOTE [cuDNN plan choice]) and the model the simulator
// allocates agree: over shapes, the heuristics' first plan fits the model's block, so cuDNN runs
// in the memory the simulator predicts; where no cuDNN workaround applies, the plan asks the
// block to the byte (what PyTorch allocates).
RC_GTEST_PROP(CudnnPlanChoice, TheModelsBlockFitsTheFirstPlan, ()) {
  const int64_t B = *rc::gen::inRange<int64_t>(1, 9), S = *rc::gen::inRange<int64_t>(1, 8193);
  const int64_t H = *rc::gen::inRange<int64_t>(1, 65), hd = 8 * *rc::gen::inRange<int64_t>(1, 33);
  const bool old_cudnn = *rc::gen::arbitrary<bool>();
  const CudnnSdpaWorkspace model = cudnn_sdpa_workspace(true, B, S, H, hd);
  RC_ASSERT(model.total() % 4 == 0);  // an fp32 temporary
  const FrontendAsMeasured f = as_measured(B, S, H, hd, old_cudnn);
  RC_ASSERT(cs::engine_limit(model.total(), f.frontend) >= f.engines[0]);
  const cs::PlanChoice c = cs::choose_plan(
      3, frontend_with_limit(f, cs::engine_limit(model.total(), f.frontend)), model.total());
  RC_ASSERT(c.index == 0);
  RC_ASSERT(c.skipped.empty());
  RC_ASSERT(c.workspace <= model.total());
  if (S % 128 == 0) RC_ASSERT(c.workspace == model.total());
  // The forward: the model gives none, and a plan asking some is passed over for one that asks
  // none.
  const int64_t fwd = cudnn_sdpa_workspace(false, B, S, H, hd).total();
  RC_ASSERT(fwd == 0);
  const FrontendAsMeasured ff{0, {*rc::gen::inRange<int64_t>(1, 1 << 20), 0}};
  const cs::PlanChoice cf =
      cs::choose_plan(2, frontend_with_limit(ff, cs::engine_limit(fwd, 0)), fwd);
  RC_ASSERT(cf.index == 1);
  RC_ASSERT(cf.workspace == 0);
  RC_ASSERT(cf.skipped.size() == 1u);
}

// The measured figure itself: the benchmark's backward plan 0 asked 67,109,120 engine bytes.
TEST(CudnnPlanChoice, ModelReproducesTheMeasuredBenchmarkPlan) {
  const CudnnSdpaWorkspace w = cudnn_sdpa_workspace(true, 2, 4096, 32, 64);
  EXPECT_EQ(w.engine, 67109120);
  EXPECT_EQ(w.frontend, int64_t{2} * 32 * 4096 * 65 * 4);  // dQ_accum + softmax_sum
  EXPECT_EQ(cudnn_sdpa_workspace(false, 2, 4096, 32, 64).total(), 0);
}

// A plan the model does not describe is declined with a one-line reason naming the bytes, and
// each declined call is counted under that reason.
TEST(CudnnPlanChoice, APlanAskingMoreThanTheModelIsDeclinedAndCounted) {
  const CudnnSdpaWorkspace model = cudnn_sdpa_workspace(true, 2, 4096, 32, 64);
  FrontendAsMeasured f = as_measured(2, 4096, 32, 64, false);
  f.engines = {f.engines[1], f.engines[2]};  // only the plans asking twice the fitted engine part
  const int64_t limit = cs::engine_limit(model.total(), f.frontend);
  const cs::PlanChoice c = cs::choose_plan(2, frontend_with_limit(f, limit), model.total());
  EXPECT_EQ(c.index, -1);
  ASSERT_EQ(c.skipped.size(), 2u);
  const std::string why = cs::no_plan_reason(c, model.total(), f.frontend, model.frontend);
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_NE(why.find("no plan within the model's workspace of " + std::to_string(model.total()) +
                     " bytes"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("plan 0: [cudnn_frontend] Error: Skipping plan since workspace violation. "
                     "Requires 134217856"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find("the model assumed"), std::string::npos)
      << why;  // the frontend's part was as modelled
  // The frontend asking more for its own tensors than modelled, and more than the whole block.
  const std::string over =
      cs::no_plan_reason(cs::PlanChoice{}, model.total(), model.total() + 8, model.frontend);
  EXPECT_NE(over.find("the frontend's own tensors take " + std::to_string(model.total() + 8)),
            std::string::npos)
      << over;
  EXPECT_NE(over.find("the model assumed " + std::to_string(model.frontend)), std::string::npos)
      << over;
  // A plan that built but asks more than the block (were the frontend's cap not kept) is passed
  // over.
  const cs::PlanChoice big = cs::choose_plan(
      1,
      [&](int64_t) {
        return cs::PlanOutcome{"", model.total() + 1};
      },
      model.total());
  EXPECT_EQ(big.index, -1);
  ASSERT_EQ(big.skipped.size(), 1u);
  EXPECT_NE(big.skipped[0].find("exceeds the model's " + std::to_string(model.total())),
            std::string::npos);

  cs::PathCounts counts;
  counts.ran(false);
  counts.declined(true, "B 2, S 4096, heads 32/8, head_dim 64", why);
  counts.declined(true, "B 2, S 4096, heads 32/8, head_dim 64", why);
  counts.ran(false);
  const auto got = counts.counts();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (std::pair<std::string, int64_t>{"cudnn forward", 2}));
  EXPECT_EQ(got[1].first, "flash backward: B 2, S 4096, heads 32/8, head_dim 64: " + why);
  EXPECT_EQ(got[1].second, 2);
}

}  // namespace
