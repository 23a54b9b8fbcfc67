// Host-side planning of the CUDA kernels (backends/cuda/kernels/plan.h, index_math.h), checked
// without a GPU: every copy layout is executed on the host through the same index function the
// device kernel uses and compared bit for bit with the CPU kernel; every cuBLASLt layout is
// executed by a column-major reference GEMM and compared with the CPU linear kernels; the eager
// decompositions' index maps (eager_index.h) are executed on the host against the CPU kernels;
// attention index maps, operand checks and launch shapes are checked directly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/eager_index.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"
#include "core/runtime/cudnn_sdpa_workspace.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace fullshard;
using namespace fullshard::cuda;
using kt::HT;

// Executes copy jobs on host memory exactly as the device kernels do: a bit copy of bytes
// (same dtype) or fp32 load -> round-to-nearest-even store (cast), zeros past src_limit.
void run_jobs_on_host(const OpCall& op, const std::vector<plan::CopyJob>& jobs, std::vector<HT*> in,
                      std::vector<HT*> out) {
  for (const auto& j : jobs) {
    const DType sd = op.inputs[j.in].meta.dtype, dd = op.outputs[j.out].meta.dtype;
    if (sd == dd) {
      const Copy2D b = plan::to_bytes(j.c, static_cast<int64_t>(dtype_size(sd)));
      const auto* src = static_cast<const unsigned char*>(in[j.in]->data());
      auto* dst = static_cast<unsigned char*>(out[j.out]->data());
      for (int64_t e = 0; e < copy2d_numel(b); ++e) {
        int64_t s, d;
        copy2d_index(b, e, s, d);
        dst[d] = s < b.src_limit ? src[s] : 0;
      }
    } else {
      for (int64_t e = 0; e < copy2d_numel(j.c); ++e) {
        int64_t s, d;
        copy2d_index(j.c, e, s, d);
        out[j.out]->set(d, s < j.c.src_limit ? in[j.in]->get(s) : 0.0);
      }
    }
  }
}

// Runs `op` on the CPU kernels with fresh outputs, and the plan on the host with other fresh
// outputs, and expects identical bytes.
void expect_plan_matches_cpu(OpKind kind, std::vector<HT*> in, std::vector<DType> out_dt,
                             std::vector<Shape> out_shape, std::vector<int64_t> iargs,
                             std::vector<plan::CopyJob> (*planner)(const OpCall&)) {
  std::vector<HT> a, b;
  for (size_t i = 0; i < out_dt.size(); ++i) {
    a.emplace_back(out_dt[i], out_shape[i]);
    b.emplace_back(out_dt[i], out_shape[i]);
    // Poison the plan's outputs: every element must be written.
    std::memset(b.back().data(), 0x7f, b.back().meta.nbytes());
  }
  std::vector<HT*> pa, pb;
  for (auto& t : a) pa.push_back(&t);
  for (auto& t : b) pb.push_back(&t);
  kt::run(kind, in, pa, iargs);
  const OpCall op = kt::make_call(kind, in, pb, iargs);
  run_jobs_on_host(op, planner(op), in, pb);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].meta.nbytes()))
        << op_kind_name(kind) << " output " << i;
}

TEST(CudaPlan, CopyPairwiseAndCastsMatchCpu) {
  std::mt19937 rng(1);
  const DType dts[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  for (DType s : dts)
    for (DType d : dts)
      for (int64_t n : {1, 7, 64, 1001}) {
        HT x = kt::random_tensor(s, {n}, rng, -3, 3);
        HT y = kt::random_tensor(s, {n, 1}, rng, -3, 3);
        expect_plan_matches_cpu(OpKind::kCopy, {&x, &y}, {d, d}, {{n}, {n, 1}}, {},
                                plan::plan_copy);
      }
  HT ids(DType::kInt64, {5});
  for (int i = 0; i < 5; ++i) ids.set(i, i * 1000003);
  expect_plan_matches_cpu(OpKind::kCopy, {&ids}, {DType::kInt64}, {{5}}, {}, plan::plan_copy);
}

TEST(CudaPlan, RowConcatMatchesCpu) {
  std::mt19937 rng(2);
  for (int64_t rows : {1, 3, 17}) {
    HT a = kt::random_tensor(DType::kBFloat16, {rows, 5}, rng);
    HT b = kt::random_tensor(DType::kFloat32, {rows, 1}, rng);
    HT c = kt::random_tensor(DType::kBFloat16, {rows, 8}, rng);
    for (DType d : {DType::kBFloat16, DType::kFloat32})
      expect_plan_matches_cpu(OpKind::kCopy, {&a, &b, &c}, {d}, {{rows, 14}}, {rows},
                              plan::plan_copy);
  }
}

TEST(CudaPlan, AllGatherCopyInAndOutMatchCpu) {
  std::mt19937 rng(3);
  HT s0 = kt::random_tensor(DType::kFloat32, {6}, rng),
     s1 = kt::random_tensor(DType::kFloat32, {1}, rng);
  HT s2 = kt::random_tensor(DType::kBFloat16, {9}, rng);
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    expect_plan_matches_cpu(OpKind::kAllGatherCopyIn, {&s0, &s1, &s2}, {d}, {{16}}, {},
                            plan::plan_all_gather_copy_in);
  for (int64_t W : {1, 2, 4}) {
    HT ag = kt::random_tensor(DType::kBFloat16, {W * 16}, rng);
    expect_plan_matches_cpu(
        OpKind::kAllGatherCopyOut, {&ag}, {DType::kBFloat16, DType::kFloat32, DType::kBFloat16},
        {{W * 6}, {W * 1}, {W * 9}}, {6, 1, 9, W}, plan::plan_all_gather_copy_out);
  }
}

TEST(CudaPlan, ChunkCatMatchesCpu) {
  std::mt19937 rng(4);
  // 17 rows over 4 ranks: 5, 5, 5, 2 real rows + 3 zero rows; a 1-D and a 1-row grad too.
  HT g0 = kt::random_tensor(DType::kBFloat16, {17, 3}, rng),
     g1 = kt::random_tensor(DType::kBFloat16, {5}, rng);
  HT g2 = kt::random_tensor(DType::kFloat32, {1, 4}, rng);
  for (int64_t W : {1, 3, 4, 8}) {
    int64_t row = 0;
    for (const HT* g : {&g0, &g1, &g2}) {
      const int64_t d0 = g->meta.shape[0], rn = g->numel() / d0;
      row += (d0 + W - 1) / W * rn;
    }
    for (DType d : {DType::kBFloat16, DType::kFloat32})
      expect_plan_matches_cpu(OpKind::kChunkCat, {&g0, &g1, &g2}, {d}, {{W * row}}, {W},
                              plan::plan_chunk_cat);
  }
}

TEST(CudaPlan, CopyChecksNameTheOp) {
  HT ids(DType::kInt64, {4}), f(DType::kFloat32, {4}), small(DType::kFloat32, {3});
  const OpCall cast = kt::make_call(OpKind::kCopy, {&ids}, {&f});
  EXPECT_THROW(plan::plan_copy(cast), InternalError);
  const OpCall sizes = kt::make_call(OpKind::kCopy, {&f}, {&small});
  EXPECT_THROW(plan::plan_copy(sizes), InternalError);
  HT big(DType::kFloat32, {9});
  const OpCall ag = kt::make_call(OpKind::kAllGatherCopyIn, {&f}, {&big});
  try {
    plan::plan_all_gather_copy_in(ag);
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("'test'"), std::string::npos) << e.what();
  }
}

TEST(CudaPlan, CopyVectorWidthNeedsEveryMultipleAndAlignment) {
  alignas(64) static unsigned char buf[4096];
  Copy2D c;
  c.rows = 4;
  c.cols = 16;
  c.src_ld = 32;
  c.src_limit = 128;
  c.dst_ld = 16;
  EXPECT_EQ(plan::copy_vector(c, buf, 2, buf + 1024, 2, 8), 8);
  EXPECT_EQ(plan::copy_vector(c, buf + 2, 2, buf + 1024, 2, 8),
            1);  // 2-byte misaligned source: no 4/2 either
  EXPECT_EQ(plan::copy_vector(c, buf + 8, 2, buf + 1024, 2, 8), 4);
  c.dst_off = 2;
  EXPECT_EQ(plan::copy_vector(c, buf, 2, buf + 1024, 2, 8), 2);
  c.dst_off = 0;
  c.cols = 15;
  EXPECT_EQ(plan::copy_vector(c, buf, 2, buf + 1024, 2, 8), 1);
  c.cols = 16;
  c.src_limit = 100;  // 100 = 4 * 25: a 4-wide vector never straddles the limit, 8 would
  EXPECT_EQ(plan::copy_vector(c, buf, 2, buf + 1024, 2, 8), 4);
  // Bytes: 16-byte vectors over a 16-byte aligned, 16-multiple layout.
  const Copy2D b = plan::to_bytes(Copy2D{2, 8, 0, 8, 16, 0, 8}, 2);
  EXPECT_EQ(b.cols, 16);
  EXPECT_EQ(b.src_limit, 32);
  EXPECT_EQ(plan::copy_vector(b, buf, 1, buf + 64, 1, 16), 16);
}

TEST(CudaPlan, FillPatternRepeatsTheRoundedElement) {
  unsigned char p[16];
  plan::fill_pattern(DType::kBFloat16, 1.00390625,
                     p);  // halfway between bf16 1 and 1 + 2^-7: ties to even -> 1.0
  for (int i = 0; i < 16; i += 2) {
    uint16_t h;
    std::memcpy(&h, p + i, 2);
    EXPECT_EQ(h, float_to_bf16(1.0f));
  }
  plan::fill_pattern(DType::kInt64, -3, p);
  int64_t v[2];
  std::memcpy(v, p, 16);
  EXPECT_EQ(v[0], -3);
  EXPECT_EQ(v[1], -3);
  plan::fill_pattern(DType::kFloat32, 0.1, p);
  float f[4];
  std::memcpy(f, p, 16);
  for (float x : f) EXPECT_EQ(x, 0.1f);
}

TEST(CudaPlan, LaunchShapes) {
  EXPECT_EQ(plan::launch_1d(0).grid, 1u);
  EXPECT_EQ(plan::launch_1d(1).grid, 1u);
  EXPECT_EQ(plan::launch_1d(256).grid, 1u);
  EXPECT_EQ(plan::launch_1d(257).grid, 2u);
  EXPECT_EQ(plan::launch_1d(int64_t{1} << 40).grid, static_cast<unsigned>(plan::kMaxGrid));
  EXPECT_EQ(plan::launch_1d(1000, 128).block, 128u);
  EXPECT_EQ(plan::launch_1d(1000, 128).grid, 8u);
  unsigned last = 0;
  for (int64_t d : {1, 768, 1024, 1025, 2048, 4096, 8192, 50257, 128256}) {
    const unsigned b = plan::row_block(d);
    EXPECT_GE(b, last);
    EXPECT_EQ(b % 32, 0u);  // block_sum needs whole warps
    EXPECT_LE(b, 1024u);
    last = b;
  }
}

// Row-major linear ops through their cuBLASLt plans (column-major reference) vs the CPU kernels.
TEST(CudaPlan, GemmLayoutsMatchCpuLinear) {
  std::mt19937 rng(5);
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {3, 5, 7},
                         {8, 1, 3},
                         {1, 9, 4},
                         {6, 4, 1}}) {
    for (bool bias : {false, true}) {
      HT x = kt::random_tensor(DType::kFloat32, {M, K}, rng),
         w = kt::random_tensor(DType::kFloat32, {N, K}, rng);
      HT b = kt::random_tensor(DType::kFloat32, {N}, rng), y(DType::kFloat32, {M, N}),
         yr(DType::kFloat32, {M, N});
      std::vector<HT*> ins = {&x, &w};
      if (bias) ins.push_back(&b);
      kt::run(OpKind::kLinear, ins, {&y}, {M, K, N});
      const plan::GemmPlan p =
          plan::plan_gemm(kt::make_call(OpKind::kLinear, ins, {&yr}, {M, K, N}));
      EXPECT_EQ(p.bias, bias);
      const kt::Vec a = ins[p.a_in]->values(), bb = ins[p.b_in]->values(), bv = b.values();
      kt::Vec c(static_cast<size_t>(M * N));
      plan::reference_gemm(p, a.data(), bb.data(), bias ? bv.data() : nullptr, c.data());
      KT_EXPECT_CLOSE(c, y.values(), 1e-5, 1e-5);

      HT g = kt::random_tensor(DType::kFloat32, {M, N}, rng), gx(DType::kFloat32, {M, K}),
         gw(DType::kFloat32, {N, K});
      kt::run(OpKind::kLinearBackwardInput, {&g, &w}, {&gx}, {M, K, N});
      const plan::GemmPlan pi =
          plan::plan_gemm(kt::make_call(OpKind::kLinearBackwardInput, {&g, &w}, {&gx}, {M, K, N}));
      const std::vector<HT*> bi = {&g, &w};
      kt::Vec ci(static_cast<size_t>(M * K));
      plan::reference_gemm(pi, bi[pi.a_in]->values().data(), bi[pi.b_in]->values().data(), nullptr,
                           ci.data());
      KT_EXPECT_CLOSE(ci, gx.values(), 1e-5, 1e-5);

      kt::run(OpKind::kLinearBackwardWeight, {&g, &x}, {&gw}, {M, K, N});
      const plan::GemmPlan pw =
          plan::plan_gemm(kt::make_call(OpKind::kLinearBackwardWeight, {&g, &x}, {&gw}, {M, K, N}));
      const std::vector<HT*> bw = {&g, &x};
      kt::Vec cw(static_cast<size_t>(N * K));
      plan::reference_gemm(pw, bw[pw.a_in]->values().data(), bw[pw.b_in]->values().data(), nullptr,
                           cw.data());
      KT_EXPECT_CLOSE(cw, gw.values(), 1e-5, 1e-5);
    }
  }
}

// NOTE [Split-K partial sums in fp32] (gemm.cc): the preference every GEMM plan is built with
// lets split-K keep its partial sums in fp32 (or not split), never in the output type nor in
// place in C, for any workspace and alignment; and apply_gemm_preference writes exactly that into
// a cuBLASLt preference (read back through cuBLASLt's own getter; host-only, no GPU needed).
TEST(CudaPlan, GemmPreferenceKeepsSplitKPartialsInFp32) {
  for (uint64_t ws : {uint64_t{0}, uint64_t{1} << 20, uint64_t{32} << 20})
    for (uint32_t al : {2u, 16u, 256u}) {
      const GemmPreference p = gemm_preference(ws, al, 2 * al, al / 2);
      EXPECT_EQ(p.reduction_scheme_mask,
                uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE});  // NONE is 0
      EXPECT_EQ(p.reduction_scheme_mask &
                    (CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE | CUBLASLT_REDUCTION_SCHEME_INPLACE),
                0u);
      EXPECT_EQ(p.max_workspace_bytes, ws);
      EXPECT_EQ(p.min_alignment_a, al);
      EXPECT_EQ(p.min_alignment_b, 2 * al);
      EXPECT_EQ(p.min_alignment_c, al / 2);
      EXPECT_EQ(p.min_alignment_d, al / 2);
    }
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const GemmPreference p = gemm_preference(uint64_t{32} << 20, 16, 8, 4);
  ASSERT_TRUE(apply_gemm_preference(p, pref));
  auto get32 = [&](cublasLtMatmulPreferenceAttributes_t a) {
    uint32_t v = 0;
    size_t written = 0;
    EXPECT_EQ(cublasLtMatmulPreferenceGetAttribute(pref, a, &v, sizeof(v), &written),
              CUBLAS_STATUS_SUCCESS);
    return v;
  };
  uint64_t ws = 0;
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulPreferenceGetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ws, uint64_t{32} << 20);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK),
            uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE});
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES), 16u);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES), 8u);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES), 4u);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES), 4u);
  cublasLtMatmulPreferenceDestroy(pref);
}

TEST(CudaPlan, GemmRejectsMixedOperandDtypes) {
  HT x(DType::kFloat32, {2, 3}), w(DType::kBFloat16, {4, 3}), y(DType::kBFloat16, {2, 4}),
      yh(DType::kFloat16, {2, 4});
  EXPECT_THROW(plan::plan_gemm(kt::make_call(OpKind::kLinear, {&x, &w}, {&y}, {2, 3, 4})),
               InternalError);
  HT xb(DType::kBFloat16, {2, 3});
  EXPECT_NO_THROW(plan::plan_gemm(kt::make_call(OpKind::kLinear, {&xb, &w}, {&y}, {2, 3, 4})));
  EXPECT_THROW(plan::plan_gemm(kt::make_call(OpKind::kLinear, {&xb, &w}, {&yh}, {2, 3, 4})),
               InternalError);
  HT yf(DType::kFloat32, {2, 4});
  EXPECT_NO_THROW(plan::plan_gemm(kt::make_call(OpKind::kLinear, {&xb, &w}, {&yf}, {2, 3, 4})));
  EXPECT_THROW(plan::plan_gemm(kt::make_call(OpKind::kLinear, {&xb, &w}, {&yf}, {2, 3, 5})),
               InternalError);
}

// The attention index maps against the CPU kernel's pointer arithmetic (attention.cc).
TEST(CudaPlan, AttentionIndexMaps) {
  for (int64_t packed : {0, 1}) {
    const int64_t B = 2, S = 5, H = 4, Hkv = packed ? 4 : 2, hd = 8;
    HT q(DType::kBFloat16, {B, S, packed ? 3 * H * hd : H * hd}),
        k(DType::kBFloat16, {B, S, Hkv * hd});
    HT v(DType::kBFloat16, {B, S, Hkv * hd}), o(DType::kBFloat16, {B, S, H, hd}),
        lse(DType::kFloat32, {B, H, S});
    std::vector<HT*> ins = {&q};
    if (!packed) ins = {&q, &k, &v};
    const plan::AttnPlan p = plan::plan_attention(
        kt::make_call(OpKind::kAttention, ins, {&o, &lse}, {B, S, H, Hkv, hd, packed}));
    const AttnLayout& l = p.l;
    EXPECT_EQ(l.group, H / Hkv);
    EXPECT_FLOAT_EQ(l.scale, 1.0f / std::sqrt(8.0f));
    const int64_t D = H * hd, q_ld = packed ? 3 * D : D, kv_ld = packed ? 3 * D : Hkv * hd;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t h = 0; h < H; ++h) {
          EXPECT_EQ(attn_q_index(l, b, s, h), b * S * q_ld + s * q_ld + h * hd);
          EXPECT_EQ(attn_o_index(l, b, s, h), b * S * D + s * D + h * hd);
          EXPECT_EQ(attn_lse_index(l, b, h, s), (b * H + h) * S + s);
        }
        for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
          EXPECT_EQ(attn_k_index(l, b, s, kvh),
                    b * S * kv_ld + (packed ? D : 0) + s * kv_ld + kvh * hd);
          EXPECT_EQ(attn_v_index(l, b, s, kvh),
                    b * S * kv_ld + (packed ? 2 * D : 0) + s * kv_ld + kvh * hd);
        }
      }
    EXPECT_EQ(plan::attention_uses_tensor_cores(p, DType::kBFloat16), false);  // hd 8
  }
}

TEST(CudaPlan, AttentionBackwardNeedsTheFlashTemporaries) {
  const int64_t B = 1, S = 130, H = 4, Hkv = 2, hd = 40;
  HT q(DType::kBFloat16, {B, S, H * hd}), k(DType::kBFloat16, {B, S, Hkv * hd}),
      v(DType::kBFloat16, {B, S, Hkv * hd});
  HT g(DType::kBFloat16, {B, S, H, hd}), o(DType::kBFloat16, {B, S, H, hd}),
      lse(DType::kFloat32, {B, H, S});
  HT dq(DType::kBFloat16, {B, S, H * hd}), dk(DType::kBFloat16, {B, S, Hkv * hd}),
      dv(DType::kBFloat16, {B, S, Hkv * hd});
  HT sd(DType::kFloat32, {B, H, 256}), acc(DType::kFloat32, {B, 256, H, 64});
  HT dke(DType::kBFloat16, {B, S, H, hd}), dve(DType::kBFloat16, {B, S, H, hd});
  const std::vector<int64_t> args = {B, S, H, Hkv, hd, 0};
  const std::vector<HT*> ins = {&g, &q, &k, &v, &o, &lse};
  EXPECT_THROW(plan::plan_attention_backward(
                   kt::make_call(OpKind::kAttentionBackward, ins, {&dq, &dk, &dv}, args)),
               InternalError);
  EXPECT_THROW(plan::plan_attention_backward(kt::make_call(OpKind::kAttentionBackward, ins,
                                                           {&dq, &dk, &dv, &sd, &acc}, args)),
               InternalError);  // GQA: the expanded dk / dv come too
  const plan::AttnPlan p = plan::plan_attention_backward(
      kt::make_call(OpKind::kAttentionBackward, ins, {&dq, &dk, &dv, &sd, &acc, &dke, &dve}, args));
  EXPECT_EQ(p.softmax_d_ld, 256);
  EXPECT_EQ(p.o_in, 4u);
  EXPECT_EQ(p.lse_in, 5u);
  HT sd_small(DType::kFloat32, {B, H, S});  // not padded to round128(S)
  EXPECT_THROW(
      plan::plan_attention_backward(kt::make_call(
          OpKind::kAttentionBackward, ins, {&dq, &dk, &dv, &sd_small, &acc, &dke, &dve}, args)),
      InternalError);
  // The CPU kernel accepts the same outputs (and ignores the temporaries).
  EXPECT_NO_THROW(
      kt::run(OpKind::kAttentionBackward, ins, {&dq, &dk, &dv, &sd, &acc, &dke, &dve}, args));
}

// NOTE [SDPA variants on the CUDA backend] (backends/cuda/kernels/plan.cc): the efficient and cuDNN
// kinds plan as flash with the model's outputs; the CPU kernel accepts the same calls.
TEST(CudaPlan, AttentionEfficientAndCudnnTakeTheModelsOutputs) {
  const int64_t B = 2, S = 45, H = 4, hd = 40, lse32 = 64;
  HT q(DType::kBFloat16, {B, S, H * hd}), k(DType::kBFloat16, {B, S, H * hd}),
      v(DType::kBFloat16, {B, S, H * hd});
  HT o(DType::kBFloat16, {B, S, H, hd}), lse(DType::kFloat32, {B, H, S}),
      lse_pad(DType::kFloat32, {B, H, lse32});
  const std::vector<int64_t> eff_args = {B, S, H, H, hd, 0, lse32},
                             cudnn_args = {B, S, H, H, hd, 0, S};
  // Forward: efficient's logsumexp rows are round32(S) long.
  plan::AttnPlan p = plan::plan_attention(
      kt::make_call(OpKind::kAttentionEfficient, {&q, &k, &v}, {&o, &lse_pad}, eff_args));
  EXPECT_EQ(p.l.lse_ld, lse32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i)
        EXPECT_EQ(attn_lse_index(p.l, b, h, i), (b * H + h) * lse32 + i);
  EXPECT_THROW(plan::plan_attention(
                   kt::make_call(OpKind::kAttentionEfficient, {&q, &k, &v}, {&o, &lse}, eff_args)),
               InternalError);  // rows not padded
  EXPECT_THROW(plan::plan_attention(kt::make_call(OpKind::kAttentionEfficient, {&q, &k, &v},
                                                  {&o, &lse}, {B, S, H, H, hd, 0, S - 1})),
               InternalError);  // rows shorter than S
  p = plan::plan_attention(
      kt::make_call(OpKind::kAttentionCudnn, {&q, &k, &v}, {&o, &lse}, cudnn_args));
  EXPECT_EQ(p.l.lse_ld, S);
  p = plan::plan_attention(
      kt::make_call(OpKind::kAttention, {&q, &k, &v}, {&o, &lse}, {B, S, H, H, hd, 0}));
  EXPECT_EQ(p.l.lse_ld, S);  // flash: no iargs[6]
  HT accum(DType::kFloat32,
           {B, S, H, hd});  // efficient, head dims above 128: an output accumulator
  EXPECT_NO_THROW(plan::plan_attention(
      kt::make_call(OpKind::kAttentionEfficient, {&q, &k, &v}, {&o, &lse_pad, &accum}, eff_args)));
  EXPECT_THROW(plan::plan_attention(kt::make_call(OpKind::kAttentionCudnn, {&q, &k, &v},
                                                  {&o, &lse, &accum}, cudnn_args)),
               InternalError);

  // Backward: efficient's delta [B, H, S] and dq workspace; cuDNN's one workspace.
  HT g(DType::kBFloat16, {B, S, H, hd}), dq(DType::kBFloat16, {B, S, H * hd}),
      dk(DType::kBFloat16, {B, S, H * hd});
  HT dv(DType::kBFloat16, {B, S, H * hd}), delta(DType::kFloat32, {B, H, S}),
      ws(DType::kFloat32, {B, H, 128, 128});
  // cuDNN: the model's block (NOTE [cuDNN SDPA workspace]); the frontend's part alone is too small.
  const CudnnSdpaWorkspace cw = cudnn_sdpa_workspace(true, B, S, H, hd);
  HT cws(DType::kFloat32, {cw.total() / 4}), cws_small(DType::kFloat32, {cw.frontend / 4});
  p = plan::plan_attention_backward(kt::make_call(OpKind::kAttentionEfficientBackward,
                                                  {&g, &q, &k, &v, &o, &lse_pad},
                                                  {&dq, &dk, &dv, &delta, &ws}, eff_args));
  EXPECT_EQ(p.softmax_d_ld, S);
  EXPECT_EQ(p.l.lse_ld, lse32);
  EXPECT_THROW(plan::plan_attention_backward(kt::make_call(OpKind::kAttentionEfficientBackward,
                                                           {&g, &q, &k, &v, &o, &lse_pad},
                                                           {&dq, &dk, &dv, &ws, &delta}, eff_args)),
               InternalError);  // delta first
  p = plan::plan_attention_backward(kt::make_call(OpKind::kAttentionCudnnBackward,
                                                  {&g, &q, &k, &v, &o, &lse}, {&dq, &dk, &dv, &cws},
                                                  cudnn_args));
  EXPECT_EQ(p.softmax_d_ld, S);
  EXPECT_THROW(plan::plan_attention_backward(
                   kt::make_call(OpKind::kAttentionCudnnBackward, {&g, &q, &k, &v, &o, &lse},
                                 {&dq, &dk, &dv, &cws_small}, cudnn_args)),
               InternalError);
  EXPECT_THROW(plan::plan_attention_backward(
                   kt::make_call(OpKind::kAttentionCudnnBackward, {&g, &q, &k, &v, &o, &lse},
                                 {&dq, &dk, &dv, &delta, &ws}, cudnn_args)),
               InternalError);
  // The CPU kernels take the same calls.
  EXPECT_NO_THROW(kt::run(OpKind::kAttentionEfficientBackward, {&g, &q, &k, &v, &o, &lse_pad},
                          {&dq, &dk, &dv, &delta, &ws}, eff_args));
  EXPECT_NO_THROW(kt::run(OpKind::kAttentionCudnnBackward, {&g, &q, &k, &v, &o, &lse},
                          {&dq, &dk, &dv, &cws}, cudnn_args));
}

// NOTE [Attention kernel override] (backends/cuda/kernels/plan.h): unset, empty or "auto" keeps the
// FlashAttention-2 choice, "wmma" the WMMA tensor-core kernels, "simt" forces the SIMT kernels,
// anything else is a one-line InputError naming the variable, the value and the accepted ones
// (exact spelling: a typo must not silently pick a kernel).
TEST(CudaPlan, AttentionKernelOverrideParsing) {
  using plan::AttentionKernels;
  EXPECT_EQ(plan::parse_attention_kernels(nullptr), AttentionKernels::kAuto);
  EXPECT_EQ(plan::parse_attention_kernels(""), AttentionKernels::kAuto);
  EXPECT_EQ(plan::parse_attention_kernels("auto"), AttentionKernels::kAuto);
  EXPECT_EQ(plan::parse_attention_kernels("simt"), AttentionKernels::kSimt);
  EXPECT_EQ(plan::parse_attention_kernels("wmma"), AttentionKernels::kWmma);
  for (const char* bad : {"SIMT", "simt ", "tc", "tensor_cores", "0", "sim", "WMMA", "fa3"}) {
    try {
      plan::parse_attention_kernels(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.where(), "FULLSHARD_ATTENTION_KERNELS");
      EXPECT_NE(m.find(std::string("'") + bad + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("'simt'"), std::string::npos) << m;
      EXPECT_NE(m.find("'wmma'"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

// The first call reads the variable; later changes to the environment do not switch kernels
// mid-run. (Nothing else in this binary calls attention_kernels_from_env.)
TEST(CudaPlan, AttentionKernelOverrideIsReadOnce) {
  ASSERT_EQ(setenv("FULLSHARD_ATTENTION_KERNELS", "simt", 1), 0);
  EXPECT_EQ(plan::attention_kernels_from_env(), plan::AttentionKernels::kSimt);
  ASSERT_EQ(setenv("FULLSHARD_ATTENTION_KERNELS", "auto", 1), 0);
  EXPECT_EQ(plan::attention_kernels_from_env(), plan::AttentionKernels::kSimt);
  unsetenv("FULLSHARD_ATTENTION_KERNELS");
}

TEST(CudaPlan, RopePairsMatchRotateHalf) {
  // Head h, pair i: columns h*hd + i and h*hd + i + hd/2 of row `row`.
  EXPECT_EQ(rope_first(0, 32, 8, 0, 0), 0);
  EXPECT_EQ(rope_first(3, 32, 8, 2, 1), 3 * 32 + 2 * 8 + 1);
}

TEST(CudaPlan, RopePairsCoverEveryElementOfTheRowOnce) {
  int64_t i1 = 0, i2 = 0;
  rope_pair(3, 32, 8, 2, 1, false, i1, i2);  // rotate_half: (i, i + hd/2)
  EXPECT_EQ(i1, 3 * 32 + 2 * 8 + 1);
  EXPECT_EQ(i2, 3 * 32 + 2 * 8 + 1 + 4);
  rope_pair(3, 32, 8, 2, 1, true, i1, i2);  // adjacent: (2i, 2i + 1), rope.cc's complex pairing
  EXPECT_EQ(i1, 3 * 32 + 2 * 8 + 2);
  EXPECT_EQ(i2, 3 * 32 + 2 * 8 + 3);
  for (bool adjacent : {false, true})
    for (auto [width, hd] : {std::pair<int64_t, int64_t>{2, 2}, {24, 8}, {256, 128}, {96, 6}}) {
      const int64_t row = 5;
      std::vector<int> hits(static_cast<size_t>(width), 0);
      for (int64_t h = 0; h < width / hd; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          rope_pair(row, width, hd, h, i, adjacent, i1, i2);
          ASSERT_TRUE(i1 >= row * width && i2 < (row + 1) * width && i1 < i2) << i1 << " " << i2;
          ASSERT_EQ(i1 / hd, i2 / hd) << "a pair crosses a head";
          ++hits[static_cast<size_t>(i1 - row * width)];
          ++hits[static_cast<size_t>(i2 - row * width)];
        }
      for (int64_t c = 0; c < width; ++c)
        EXPECT_EQ(hits[static_cast<size_t>(c)], 1) << "column " << c;
    }
}

// The compiled regions' operand checks (dispatch.cc) run before anything is enqueued, so they are
// checked here without a GPU: each bad layout throws naming its problem, with the CPU kernel's
// message where the CPU kernel checks the same thing (compiled.cc).
void expect_refused(OpKind k, std::vector<HT*> in, std::vector<HT*> out, std::vector<int64_t> iargs,
                    std::vector<double> fargs, const std::string& needle, bool cpu_checks_it) {
  const OpCall op = kt::make_call(k, in, out, iargs, fargs);
  std::vector<void*> pi, po;
  for (HT* t : in) pi.push_back(t->data());
  for (HT* t : out) po.push_back(t->data());
  // A check that did not fire would launch a kernel: on this machine that fails with another
  // message (no device), on a GPU it would read host pointers; either way the needle is missing.
  try {
    cuda::launch_kernel(op, pi, po, cuda::KernelContext{});
    ADD_FAILURE() << op_kind_name(k) << ": accepted, expected '" << needle << "'";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  if (!cpu_checks_it) return;
  try {
    cpu::run_kernel(op, pi, po);
    ADD_FAILURE() << op_kind_name(k) << ": the CPU kernel accepted it";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "CPU: " << e.what();
  }
}

TEST(CudaPlan, CompiledRegionsCheckOperandsBeforeLaunching) {
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  HT x(bf16, {3, 8}), a(bf16, {3, 8}), a_short(bf16, {3, 7}), w(bf16, {8}), y(bf16, {3, 8});
  HT rstd(f32, {3}), rstd_bf16(bf16, {3}), gw(bf16, {8}), ids(DType::kInt64, {3, 8});
  expect_refused(OpKind::kCompiledRMSNorm, {&x, &w}, {&y, &rstd_bf16}, {}, {1e-5},
                 "rstd must be fp32 [rows]", true);
  expect_refused(OpKind::kCompiledRMSNorm, {&x, &w}, {&y, &rstd}, {}, {}, "needs fargs[0] = eps",
                 true);
  expect_refused(OpKind::kCompiledRMSNorm, {&x, &w, &a}, {&y, &rstd}, {}, {1e-5},
                 "expected 2 inputs and 2 outputs", true);
  expect_refused(OpKind::kCompiledAddRMSNorm, {&x, &a_short, &w}, {&y, &rstd}, {}, {1e-5},
                 "operand sizes differ from x", true);
  expect_refused(OpKind::kCompiledAddRMSNorm, {&x, &a, &y}, {&y, &rstd}, {}, {1e-5},
                 "weight must have the last dim of x", true);
  expect_refused(OpKind::kCompiledAddRMSNorm, {&x, &ids, &w}, {&y, &rstd}, {}, {1e-5},
                 "must be fp32, bf16 or fp16", false);
  HT gx(bf16, {3, 8});
  expect_refused(OpKind::kCompiledRMSNormBackward, {&y, &x, &rstd, &w}, {&gx, &gw}, {}, {},
                 "needs iargs {has_a, has_g_h}", true);
  expect_refused(OpKind::kCompiledRMSNormBackward, {&y, &x, &rstd, &w}, {&gx, &gw}, {1, 0}, {},
                 "expected 5 inputs and 2 outputs", true);
  expect_refused(OpKind::kCompiledRMSNormBackward, {&y, &x, &rstd, &w, &a}, {&gx, &y}, {1, 0}, {},
                 "gradient sizes do not match x / w", true);
  expect_refused(OpKind::kCompiledRMSNormBackward, {&y, &x, &rstd, &w, &a_short}, {&gx, &gw},
                 {0, 1}, {}, "g_h has 21 elements, expected 24", false);
  HT q(bf16, {1, 3, 12}), k(bf16, {1, 3, 6}), qo(bf16, {1, 3, 12}), ko(bf16, {1, 3, 6}),
      flat(bf16, {36});
  expect_refused(OpKind::kCompiledRoPE, {&q, &k}, {&qo, &ko}, {6}, {1e4},
                 "needs iargs {head_dim, adjacent[, cp, cp_index]}", true);
  expect_refused(OpKind::kCompiledRoPE, {&q, &k}, {&qo, &ko}, {4, 0}, {1e4},
                 "head_dim must be even and divide the last dim", true);
  expect_refused(OpKind::kCompiledRoPE, {&q, &k}, {&qo, &ko}, {6, 1}, {}, "fargs[0] = theta", true);
  expect_refused(OpKind::kCompiledRoPE, {&flat, &k}, {&qo, &ko}, {6, 1}, {1e4},
                 "x must be [..., S, H*hd]", true);
  expect_refused(OpKind::kCompiledRoPEBackward, {&q}, {&ko}, {6, 0}, {1e4},
                 "output size differs from x", true);
  expect_refused(OpKind::kCompiledRoPEBackward, {&q, &k}, {&qo, &ko}, {6, 0}, {1e4},
                 "expected 1 inputs", true);
  HT n7(f32, {7}), n8(f32, {8}), i8(DType::kInt64, {8});
  expect_refused(OpKind::kCompiledSiluMul, {&n8, &n7}, {&n8}, {}, {}, "operand sizes differ", true);
  expect_refused(OpKind::kCompiledSiluMul, {&n8, &i8}, {&n8}, {}, {}, "must be fp32, bf16 or fp16",
                 false);
  expect_refused(OpKind::kCompiledSiluMulBackward, {&n8, &n8, &n8}, {&n8, &n7}, {}, {},
                 "output sizes differ", true);
  expect_refused(OpKind::kCompiledResidualAdd, {&n8, &n7, &n8}, {&n8}, {}, {},
                 "operand sizes differ", true);
  // A head wider than the kernel's frequency table is the user's model: an InputError with a fix.
  HT wide_q(bf16, {1, 2, 1024}), wide_k(bf16, {1, 2, 1024});
  const OpCall wide = kt::make_call(OpKind::kCompiledRoPE, {&wide_q, &wide_k}, {&wide_q, &wide_k},
                                    {1024, 0}, {1e4});
  EXPECT_THROW(cuda::launch_kernel(wide, {wide_q.data(), wide_k.data()},
                                   {wide_q.data(), wide_k.data()}, cuda::KernelContext{}),
               InputError);
}

// NOTE [Operand alignment] (dispatch.cc): an operand that starts inside one of its elements is
// refused before anything is enqueued, naming the op and the operand, for every dtype and side;
// one that is element-aligned but not 16-byte aligned (the scalar paths) passes the check and
// reaches the kernel's own checks. The addresses are host memory offsets: nothing is read.
TEST(CudaPlan, DispatchRefusesOperandsOffTheirElementSize) {
  alignas(256) static unsigned char buf[1 << 16];
  auto at = [&](size_t off) { return static_cast<void*>(buf + off); };
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  HT x(bf16, {5, 7}), a(f32, {5, 7}), w(bf16, {7}), y(bf16, {5, 7}), rstd(f32, {5});
  const OpCall norm =
      kt::make_call(OpKind::kCompiledAddRMSNorm, {&x, &a, &w}, {&y, &rstd}, {}, {1e-6});
  auto refusal = [&](const OpCall& op, const std::vector<void*>& in,
                     const std::vector<void*>& out) {
    try {
      cuda::launch_kernel(op, in, out, cuda::KernelContext{});
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // The GPU run's fault: an fp32 residual 2 bytes into its first element (the harness's misalign
  // 2 applied to every tensor), in the fused add + RMSNorm.
  std::string m = refusal(norm, {at(0), at(4096 + 2), at(8192)}, {at(12288), at(16384)});
  EXPECT_NE(m.find("CompiledAddRMSNorm"), std::string::npos) << m;
  EXPECT_NE(m.find("input 1 (fp32 [5, 7])"), std::string::npos) << m;
  EXPECT_NE(m.find("2 bytes into a 4-byte element"), std::string::npos) << m;
  m = refusal(norm, {at(0), at(4096), at(8192)}, {at(12288 + 1), at(16384)});
  EXPECT_NE(m.find("output 0 (bf16 [5, 7])"), std::string::npos) << m;
  m = refusal(norm, {at(0), at(4096), at(8192)}, {at(12288), at(16384 + 6)});
  EXPECT_NE(m.find("output 1 (fp32 [5])"), std::string::npos) << m;
  // Element-aligned, off 16 bytes (bf16 at +2, fp32 at +4): past the alignment check, to the
  // kernel's own (a missing eps here).
  const OpCall no_eps = kt::make_call(OpKind::kCompiledAddRMSNorm, {&x, &a, &w}, {&y, &rstd});
  m = refusal(no_eps, {at(2), at(4096 + 4), at(8192 + 2)}, {at(12288 + 2), at(16384 + 4)});
  EXPECT_EQ(m.find("element"), std::string::npos) << m;
  EXPECT_NE(m.find("needs fargs[0] = eps"), std::string::npos) << m;
  // Every element size: int64 token ids, fp16, fp32 outputs of a GEMM; bytes (uint8) never.
  HT ids(DType::kInt64, {4}), emb(bf16, {9, 8}), out(bf16, {4, 8});
  const OpCall e = kt::make_call(OpKind::kEmbedding, {&ids, &emb}, {&out});
  m = refusal(e, {at(4), at(4096)}, {at(8192)});
  EXPECT_NE(m.find("input 0 (int64 [4])"), std::string::npos) << m;
  EXPECT_NE(m.find("4 bytes into a 8-byte element"), std::string::npos) << m;
  HT hx(DType::kFloat16, {3, 5}), hw(DType::kFloat16, {7, 5}), gy(f32, {3, 7});
  const OpCall lin = kt::make_call(OpKind::kLinear, {&hx, &hw}, {&gy}, {3, 5, 7});
  m = refusal(lin, {at(0), at(4096 + 1)}, {at(8192)});
  EXPECT_NE(m.find("input 1 (fp16 [7, 5])"), std::string::npos) << m;
  m = refusal(lin, {at(0), at(4096)}, {at(8192 + 2)});
  EXPECT_NE(m.find("output 0 (fp32 [3, 7])"), std::string::npos) << m;
  HT u8(DType::kUInt8, {2, 3, 5}), u8o(DType::kUInt8, {3, 2, 5});
  // (Each op below is then refused by its own checks, so nothing is launched on a GPU machine.)
  const OpCall tb = kt::make_call(OpKind::kTransposeBlocks, {&u8}, {&u8o});  // no iargs
  m = refusal(tb, {at(1)}, {at(4096 + 3)});
  EXPECT_EQ(m.find("element"), std::string::npos) << m;
  EXPECT_NE(m, "accepted");
  // An empty operand has no element to be inside of.
  HT none(f32, {0}), none_out(DType::kInt64, {0});
  const OpCall empty = kt::make_call(OpKind::kAdd, {&none, &none}, {&none_out});
  m = refusal(empty, {at(2), at(6)}, {at(10)});
  EXPECT_EQ(m.find("element"), std::string::npos) << m;
  EXPECT_NE(m.find("must be fp32, bf16 or fp16"), std::string::npos) << m;
}

// ---- eager decompositions (eager_index.h): each map executed on the host, element by element
// as the device kernels address them, against the CPU kernel, bit for bit (fp32 values; the
// products and sums in the CPU's fp32 order).

TEST(CudaPlan, EagerBroadcastIndexMatchesCpu) {
  std::mt19937 rng(41);
  for (auto [rows, D, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {5, 12, 4}, {7, 96, 32}, {3, 9, 9}})
    for (int64_t mode : {0, 1, 2}) {
      const int64_t bn = mode == 2 ? rows * hd : mode == 1 ? D : rows;
      HT a = kt::random_tensor(DType::kFloat32, {rows, D}, rng),
         b = kt::random_tensor(DType::kFloat32, {bn}, rng);
      HT y(DType::kFloat32, {rows, D});
      kt::run(OpKind::kMulBroadcast, {&a, &b}, {&y}, {mode, D, hd});
      const auto m = static_cast<Bcast>(mode);
      for (int64_t i = 0; i < rows * D; ++i) {
        const int64_t r = i / D, d = i - r * D;
        ASSERT_EQ(y.bits32(i),
                  std::bit_cast<uint32_t>(static_cast<float>(a.get(i)) *
                                          static_cast<float>(b.get(bcast_index(m, r, d, hd)))))
            << "mode " << mode << " element " << i;
      }
    }
}

TEST(CudaPlan, EagerRoPEComplexPairsAreAdjacent) {
  // A one-hot x: the CPU's rotation moves element `first` of pair (row, h, i) into exactly
  // `first` and `first + 1` (cos, sin of the pair's angle).
  const int64_t S = 3, H = 2, hd = 6, width = H * hd;
  for (int64_t row = 0; row < 2 * S; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        HT x(DType::kFloat32, {2, S, width}), y(DType::kFloat32, {2, S, width});
        int64_t first = 0, second = 0;
        rope_pair(row, width, hd, h, i, /*adjacent=*/true, first, second);  // index_math.h
        ASSERT_EQ(second, first + 1);
        x.set(first, 1.0);
        kt::run(OpKind::kRoPEComplex, {&x}, {&y}, {hd}, {100.0});
        const double angle =
            static_cast<double>(row % S) * std::pow(100.0, -2.0 * static_cast<double>(i) / hd);
        for (int64_t e = 0; e < y.numel(); ++e) {
          const double want = e == first ? std::cos(angle) : e == first + 1 ? std::sin(angle) : 0.0;
          ASSERT_NEAR(y.get(e), want, 1e-6)
              << "row " << row << " head " << h << " pair " << i << " element " << e;
        }
      }
}

TEST(CudaPlan, EagerRepeatKVIndexMatchesCpu) {
  std::mt19937 rng(42);
  using Kv = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  for (auto [rows, kv, rep, hd] : {Kv{1, 1, 1, 1}, {5, 3, 2, 7}, {4, 2, 4, 8}}) {
    HT x = kt::random_tensor(DType::kFloat32, {rows, kv * hd}, rng),
       y(DType::kFloat32, {rows, kv * rep * hd});
    kt::run(OpKind::kRepeatKV, {&x}, {&y}, {kv, rep, hd});
    for (int64_t e = 0; e < y.numel(); ++e)
      ASSERT_EQ(y.bits32(e), x.bits32(repeat_kv_source(e, rep, hd))) << e;
    HT g = kt::random_tensor(DType::kFloat32, {rows, kv * rep * hd}, rng),
       gx(DType::kFloat32, {rows, kv * hd});
    kt::run(OpKind::kRepeatKVBackward, {&g}, {&gx}, {kv, rep, hd});
    for (int64_t e = 0; e < gx.numel(); ++e) {
      float acc = 0.0f;
      for (int64_t j = 0; j < rep; ++j)
        acc += static_cast<float>(g.get(repeat_kv_copy(e, j, rep, hd)));
      ASSERT_EQ(gx.bits32(e), std::bit_cast<uint32_t>(acc)) << e;
    }
  }
}

TEST(CudaPlan, EagerRotateHalfIndexMatchesCpu) {
  std::mt19937 rng(43);
  for (int64_t hd : {2, 6, 16}) {
    const int64_t blocks = 7;
    HT neg = kt::random_tensor(DType::kFloat32, {blocks, hd / 2}, rng);
    HT x = kt::random_tensor(DType::kFloat32, {blocks, hd}, rng);
    HT y(DType::kFloat32, {blocks, hd});
    kt::run(OpKind::kRotateHalfCat, {&neg, &x}, {&y}, {hd});
    for (int64_t e = 0; e < y.numel(); ++e) {
      int64_t si;
      const uint32_t want = rotate_half_source(e, hd, si) ? neg.bits32(si) : x.bits32(si);
      ASSERT_EQ(y.bits32(e), want) << "hd " << hd << " element " << e;
    }
  }
}

// The CUDA dispatcher refuses what the CPU kernels refuse (and a few layouts its kernels cannot
// address), naming the op, before anything is launched: no GPU needed. Host addresses stand in
// for device ones; they are never touched.
TEST(CudaPlan, EagerOpsRefuseBadLayoutsBeforeLaunching) {
  cuda::KernelContext ctx;
  auto refused = [&](OpKind k, std::vector<HT*> in, std::vector<HT*> out,
                     std::vector<int64_t> iargs, std::vector<double> fargs,
                     const std::string& why) {
    const OpCall op = kt::make_call(k, in, out, iargs, fargs);
    std::vector<void*> pi, po;
    for (HT* t : in) pi.push_back(t->data());
    for (HT* t : out) po.push_back(t->data());
    try {
      cuda::launch_kernel(op, pi, po, ctx);
      ADD_FAILURE() << op_kind_name(k) << ": no throw (" << why << ")";
    } catch (const InternalError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'test'"), std::string::npos) << m;
      EXPECT_EQ(m.find("CUDA kernel launch"), std::string::npos)
          << why << ": got as far as a launch: " << m;
    }
  };
  HT a(DType::kFloat32, {2, 6}), y(DType::kFloat32, {2, 6}), b4(DType::kFloat32, {4}),
      r2(DType::kFloat32, {2, 1});
  HT i64(DType::kInt64, {2, 6}), y5(DType::kFloat32, {5});
  refused(OpKind::kPowScalar, {&a}, {&y}, {}, {}, "no exponent");
  refused(OpKind::kPowScalar, {&i64}, {&y}, {}, {2.0}, "int64 input");
  refused(OpKind::kAddScalar, {&a}, {&y5}, {}, {1.0}, "sizes differ");
  refused(OpKind::kRsqrt, {&a, &a}, {&y}, {}, {}, "two inputs");
  refused(OpKind::kMulBroadcast, {&a, &b4}, {&y}, {1, 6}, {}, "b is not [D]");
  refused(OpKind::kMulBroadcast, {&a, &r2}, {&y}, {2, 6, 4}, {}, "head_dim does not divide D");
  refused(OpKind::kMulBroadcast, {&a, &r2}, {&y}, {0}, {}, "no D");
  refused(OpKind::kSumLastDim, {&a}, {&b4}, {6}, {}, "2 rows, 4 outputs");
  refused(OpKind::kSumLastDim, {&a}, {&r2}, {5}, {}, "5 does not divide 12");
  refused(OpKind::kSumLeadingDims, {&a}, {&b4}, {6}, {}, "output is not [D]");
  refused(OpKind::kExpandLastDim, {&b4}, {&y}, {6}, {1.0}, "4 values for 2 rows");
  refused(OpKind::kExpandLastDim, {&r2}, {&y}, {6}, {}, "no scale");
  HT x(DType::kFloat32, {1, 3, 12}), xo(DType::kFloat32, {1, 3, 12}),
      wide(DType::kFloat32, {1, 3, 2052});
  refused(OpKind::kRoPEComplex, {&x}, {&xo}, {5}, {1e4}, "odd head_dim");
  refused(OpKind::kRoPEComplex, {&x}, {&xo}, {6}, {1e4, 8.0},
          "fargs neither {theta} nor llama3's five");
  // A head_dim over the RoPE kernel's 512 is the model's choice: an InputError naming the fix.
  EXPECT_THROW(cuda::launch_kernel(
                   kt::make_call(OpKind::kRoPEComplexBackward, {&wide}, {&wide}, {2052}, {1e4}),
                   {wide.data()}, {wide.data()}, ctx),
               InputError);
  HT c(DType::kFloat32, {1, 3, 6}), sn(DType::kFloat32, {1, 3, 6});
  refused(OpKind::kRotaryCosSin, {}, {&c, &sn}, {4}, {1e4}, "cos is not [.., head_dim]");
  refused(OpKind::kRotaryCosSin, {}, {&c, &sn}, {6}, {}, "no theta");
  HT kv(DType::kFloat32, {2, 8}), rep(DType::kFloat32, {2, 16}), rep_bad(DType::kFloat32, {2, 12});
  HT kv64(DType::kInt64, {2, 8}), rep64(DType::kInt64, {2, 16});
  refused(OpKind::kRepeatKV, {&kv}, {&rep_bad}, {2, 2, 4}, {},
          "the repeated tensor is not [rows, 16]");
  refused(OpKind::kRepeatKV, {&kv64}, {&rep64}, {2, 2, 4}, {}, "int64");
  refused(OpKind::kRepeatKVBackward, {&rep}, {&kv}, {2, 2}, {}, "no head_dim");
  HT half(DType::kFloat32, {2, 3}), full(DType::kFloat32, {2, 6});
  refused(OpKind::kNarrowCopy, {&full}, {&half}, {3, 6, 4, 3, 0}, {-1.0},
          "in_offset + n past in_width");
  refused(OpKind::kNarrowCopy, {&full}, {&half}, {3, 6, -1, 3, 0}, {-1.0}, "negative in_offset");
  refused(OpKind::kNarrowCopy, {&full}, {&half}, {3, 6, 3, 3}, {-1.0}, "four iargs");
  refused(OpKind::kRotateHalfCat, {&full, &full}, {&full}, {6}, {}, "neg is not half of x");
  refused(OpKind::kRotateHalfCat, {&half, &full}, {&full}, {3}, {}, "odd head_dim");
}

}  // namespace
