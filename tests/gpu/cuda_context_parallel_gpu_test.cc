// Context parallelism's and the zero-bubble split's kernels on a GPU (context_parallel.cu, NOTE
// [Ring attention on the CUDA backend] in context_parallel_plan.h; the split RMSNorm backward in
// norm_rows.cuh) against the CPU kernels through cuda::launch_kernel: ring rounds (half the keys,
// no mask; contiguous operands here, the strided halves are cuda_kernels.context_parallel_plan's),
// forward and backward with GQA; kSdpaMerge full and partial; kSeqRowsAdd; kRMSNormBackwardInput
// and kRMSNormBackwardWeight. fp32, bf16 and fp16 storage. Exits 77 (ctest: skipped) without a
// GPU. Built here; not yet run on a GPU (docs/context-parallel.md).
#include <random>
#include <string>
#include <vector>

#include "core/runtime/attention_args.h"
#include "core/runtime/context_parallel_args.h"
#include "tests/gpu/kernel_compare.h"

namespace fullshard {
namespace {

using kc::run_both;
using kt::HT;

std::vector<int64_t> iargs_of(const AttentionArgs& a) {
  OpCall op;
  a.encode(op);
  return op.iargs;
}

TEST(CudaContextParallel, RingRoundsMatchCpu) {
  std::mt19937 rng(5);
  struct Case {
    int64_t B, Sq, Skv, H, Hkv, hd;
  };
  for (DType d : kc::kFloats)
    for (Case c : {Case{1, 4, 2, 1, 1, 8}, Case{2, 16, 8, 4, 2, 64}, Case{2, 8, 16, 2, 1, 40}}) {
      AttentionArgs a;
      a.batch = c.B, a.seq = c.Sq, a.heads = c.H, a.kv_heads = c.Hkv, a.head_dim = c.hd;
      a.lse_len = c.Sq, a.kv_seq = c.Skv, a.causal = false;
      a.q_batch_rows = c.Sq, a.kv_batch_rows = c.Skv;
      const std::vector<int64_t> args = iargs_of(a);
      const int64_t D = c.H * c.hd, Dkv = c.Hkv * c.hd, sr = (c.Sq + 127) / 128 * 128;
      HT q = kt::random_tensor(d, {c.B, c.Sq, D}, rng, -2, 2);
      HT k = kt::random_tensor(d, {c.B, c.Skv, Dkv}, rng, -2, 2);
      HT v = kt::random_tensor(d, {c.B, c.Skv, Dkv}, rng);
      HT o(d, {c.B, c.Sq, D}), lse(DType::kFloat32, {c.B, c.H, c.Sq});
      const std::string what = kc::name(d) + " Sq " + std::to_string(c.Sq) + " Skv " +
                               std::to_string(c.Skv) + " hd " + std::to_string(c.hd);
      const auto r = run_both(OpKind::kAttention, {&q, &k, &v}, {&o, &lse}, args);
      const bool half = d != DType::kFloat32;
      kc::expect_close(r.gpu[0], r.cpu[0], half ? 1e-2 : 2e-5, 0, what + " O");
      kc::expect_close(r.gpu[1], r.cpu[1], 2e-5, 1e-6, what + " lse");
      o = r.cpu[0];
      lse = r.cpu[1];
      HT g = kt::random_tensor(d, {c.B, c.Sq, D}, rng);
      HT dq(d, {c.B, c.Sq, D}), dk(d, {c.B, c.Skv, Dkv}), dv(d, {c.B, c.Skv, Dkv});
      HT sd(DType::kFloat32, {c.B, c.H, sr}),
          acc(DType::kFloat32, {c.B, sr, c.H, (c.hd + 31) / 32 * 32});
      HT dke(d, {c.B, c.Skv, c.H, c.hd}), dve(d, {c.B, c.Skv, c.H, c.hd});
      std::vector<HT*> outs = {&dq, &dk, &dv, &sd, &acc};
      if (c.H != c.Hkv) outs.insert(outs.end(), {&dke, &dve});
      const auto rb = run_both(OpKind::kAttentionBackward, {&g, &q, &k, &v, &o, &lse}, outs, args);
      for (int i = 0; i < 3; ++i)
        kc::expect_close(rb.gpu[i], rb.cpu[i], half ? 2e-2 : 1e-4, half ? 1e-2 : 1e-4,
                         what + " d" + "qkv"[i]);
    }
}

TEST(CudaContextParallel, MergeAndRowsAddMatchCpu) {
  std::mt19937 rng(6);
  for (DType d : kc::kFloats)
    for (bool partial : {false, true}) {
      const int64_t B = 2, L = 10, H = 3, hd = 7, Lq = partial ? 5 : 10, D = H * hd;
      HT out = kt::random_tensor(DType::kFloat32, {B, L, D}, rng);
      HT lse = kt::random_tensor(DType::kFloat32, {B, H, L}, rng, -3, 3);
      HT blk = kt::random_tensor(d, {B, Lq, D}, rng);
      HT blse = kt::random_tensor(DType::kFloat32, {B, H, Lq}, rng, -3, 3);
      HT o2(DType::kFloat32, {B, L, D}), l2(DType::kFloat32, {B, H, L});
      const auto r =
          run_both(OpKind::kSdpaMerge, {&out, &lse, &blk, &blse}, {&o2, &l2}, {partial ? 1 : 0});
      const std::string what = kc::name(d) + (partial ? " partial" : " full");
      kc::expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, what + " merge out");
      kc::expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, what + " merge lse");
      HT dst = kt::random_tensor(d, {B, L, D}, rng), src = kt::random_tensor(d, {B, 4, D}, rng);
      const auto ra = run_both(OpKind::kSeqRowsAdd, {&dst, &src}, {&dst}, {B, L, 3, 4, D});
      kc::expect_bits(ra.gpu[0], ra.cpu[0], kc::name(d) + " seq rows add");
    }
}

TEST(CudaContextParallel, SplitRmsNormBackwardMatchesCpu) {
  std::mt19937 rng(7);
  for (DType d : kc::kFloats)
    for (int64_t rows : {1, 37, 300})
      for (int64_t D : {8, 40, 256}) {
        HT g = kt::random_tensor(d, {rows, D}, rng), x = kt::random_tensor(d, {rows, D}, rng);
        HT rstd = kt::random_tensor(DType::kFloat32, {rows}, rng, 0.5, 2);
        HT w = kt::random_tensor(d, {D}, rng), gx(d, {rows, D}), gw(d, {D});
        const std::string what =
            kc::name(d) + " " + std::to_string(rows) + " x " + std::to_string(D);
        const auto ri = run_both(OpKind::kRMSNormBackwardInput, {&g, &x, &rstd, &w}, {&gx});
        kc::expect_close(ri.gpu[0], ri.cpu[0], 1e-6, 1e-6, what + " gx");
        const auto rw = run_both(OpKind::kRMSNormBackwardWeight, {&g, &x, &rstd}, {&gw});
        kc::expect_close(rw.gpu[0], rw.cpu[0], 1e-6, 1e-6, what + " gw");
      }
}

}  // namespace
}  // namespace fullshard

int main(int argc, char** argv) {
  return kc::run_gpu_tests(argc, argv, "cuda_context_parallel_gpu_test");
}
