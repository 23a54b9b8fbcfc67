// The vectorised memory-bound kernels against the CPU reference kernels at the shapes where
// their fast paths and fallbacks part (docs/cuda-kernels.md's tolerances, harness
// kernel_compare.h): NOTE [One-pass log_softmax] and NOTE [nll_loss backward as a scatter]
// (rows.cu) at the 1B model's vocab 128256 and odd vocabs, NOTE [Norm rows in registers]
// (norm_rows.cuh) at one, two and too many register groups, NOTE [Multi-tensor AdamW]
// (elementwise.cu, AdamW and the clip scale) over many tensors across launch batches and chunk
// edges. Each runs with 16-byte aligned bases and with every base off by one element (8 bytes where
// fp32 / int64 operands ride along): the scalar fallbacks. Needs a GPU: exits 77 (ctest: skipped)
// without one.
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/kernel_compare.h"
#include "tests/unit/kernels_test_support.h"

namespace {

using namespace fullshard;
using namespace ckt;
using kt::HT;

// The harness shifts every device tensor by the same bytes. One element of the dtype where all
// operands share it; 8 bytes where int64 labels or fp32 statistics ride along (every element
// still aligned, no base 16-byte aligned: a 2-byte shift would misalign the fp32 / int64 ones).
size_t one_element(DType d) { return dtype_size(d); }
constexpr size_t kEightBytes = 8;

TEST(CudaRowKernels, CrossEntropyAtTheModelsVocab) {
  std::mt19937 rng(41);
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (auto [rows, V] : {std::pair<int64_t, int64_t>{16, 128256}, {9, 128257}, {5, 8}, {3, 3}})
      for (size_t misalign : {size_t{0}, one_element(d)}) {
        const std::string at = name(d) + " [" + std::to_string(rows) + ", " + std::to_string(V) +
                               "] +" + std::to_string(misalign) + "B";
        HT x = kt::random_tensor(d, {rows, V}, rng, -8, 8), y(d, {rows, V});
        Both r = run_both(OpKind::kLogSoftmax, {&x}, {&y}, {}, {}, misalign);
        expect_close(r.gpu[0], r.cpu[0], 2e-6 * 16, 1e-6, "log_softmax " + at);
        const Both again = run_both(OpKind::kLogSoftmax, {&x}, {&y}, {}, {}, misalign);
        expect_bits(again.gpu[0], r.gpu[0], "log_softmax run twice " + at);
        HT ly = r.cpu[0], g = kt::random_tensor(d, {rows, V}, rng), gx(d, {rows, V});
        r = run_both(OpKind::kLogSoftmaxBackward, {&g, &ly}, {&gx}, {}, {}, misalign);
        expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "log_softmax backward " + at);
        HT labels(DType::kInt64, {rows});
        for (int64_t i = 0; i < rows; ++i) labels.set(i, i % 4 == 3 ? -100 : (i * 7919 + 5) % V);
        HT loss(DType::kFloat32, {}), tw(DType::kFloat32, {});
        const size_t shift = misalign ? kEightBytes : 0;  // int64 labels
        r = run_both(OpKind::kNllLoss, {&ly, &labels}, {&loss, &tw}, {}, {}, shift);
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 1e-6, "nll loss " + at);
        // The scatter writes the counted rows' one element after a memset: every other element
        // must be +0 (the harness starts GPU outputs as NaN bytes).
        HT gl = kt::from_values(DType::kFloat32, {}, {0.75}), twv = r.cpu[1], glp(d, {rows, V});
        r = run_both(OpKind::kNllLossBackward, {&gl, &labels, &twv}, {&glp}, {}, {}, shift);
        expect_bits(r.gpu[0], r.cpu[0], "nll backward " + at);
      }
}

TEST(CudaRowKernels, NormsInRegistersAndTheirFallbacks) {
  std::mt19937 rng(42);
  // 2048: one group (the 1B model); 16384: two groups of 1024 threads; 16392: more than two
  // groups (the scalar kernels); 24: fewer vectors than a warp; 2050: D % 8 != 0.
  for (DType d : kFloats)
    for (auto [rows, D] :
         {std::pair<int64_t, int64_t>{64, 2048}, {3, 16384}, {3, 16392}, {33, 24}, {5, 2050}})
      for (size_t misalign : {size_t{0}, kEightBytes}) {  // fp32 rstd / mean beside every dtype
        const std::string at = name(d) + " [" + std::to_string(rows) + ", " + std::to_string(D) +
                               "] +" + std::to_string(misalign) + "B";
        HT x = kt::random_tensor(d, {rows, D}, rng, -2, 2),
           w = kt::random_tensor(d, {D}, rng, 0.5, 1.5);
        HT b = kt::random_tensor(d, {D}, rng), y(d, {rows, D}), mean(DType::kFloat32, {rows});
        HT rstd(DType::kFloat32, {rows});
        Both r = run_both(OpKind::kRMSNorm, {&x, &w}, {&y, &rstd}, {}, {1e-5}, misalign);
        expect_close(r.gpu[1], r.cpu[1], 0, 1e-6, "rms rstd " + at);
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 2e-6, "rms y " + at);
        HT g = kt::random_tensor(d, {rows, D}, rng), gx(d, {rows, D}), gw(d, {D}), gb(d, {D});
        HT rs = r.cpu[1];
        r = run_both(OpKind::kRMSNormBackward, {&g, &x, &rs, &w}, {&gx, &gw}, {}, {}, misalign);
        expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "rms gx " + at);
        expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "rms gw " + at);
        // In place (gx over g), as autograd may hand it: each element read and written by one
        // thread.
        HT g2 = g;
        r = run_both(OpKind::kRMSNormBackward, {&g2, &x, &rs, &w}, {&g2, &gw}, {}, {}, misalign);
        expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "rms gx in place " + at);
        r = run_both(OpKind::kLayerNorm, {&x, &w, &b}, {&y, &mean, &rstd}, {}, {1e-5}, misalign);
        expect_close(r.gpu[2], r.cpu[2], 0, 1e-6, "ln rstd " + at);
        expect_close(r.gpu[0], r.cpu[0], 1e-6, 2e-6, "ln y " + at);
        HT mu = r.cpu[1], rs2 = r.cpu[2];
        r = run_both(OpKind::kLayerNormBackward, {&g, &x, &mu, &rs2, &w}, {&gx, &gw, &gb}, {}, {},
                     misalign);
        expect_close(r.gpu[0], r.cpu[0], 1e-5, 1e-5, "ln gx " + at);
        expect_close(r.gpu[1], r.cpu[1], 1e-6, 1e-6, "ln gw " + at);
        expect_close(r.gpu[2], r.cpu[2], 1e-6, 1e-6, "ln gb " + at);
      }
}

// Bit for bit with the CPU: 70 parameters (three launch batches of 32), sizes at the 65536-element
// chunk edges and with n % 8 tails, fused and foreach, fp32 and bf16 states; aligned and one
// element off.
TEST(CudaRowKernels, MultiTensorAdamWIsBitExact) {
  std::mt19937 rng(43);
  std::vector<int64_t> sizes = {65535, 65536, 65537, 2 * 65536 + 3, 1, 7, 8, 9};
  for (int i = 0; i < 62; ++i) sizes.push_back(1 + (i * 7919) % 3000);
  for (int64_t fused : {0, 1})
    for (DType sd : {DType::kFloat32, DType::kBFloat16})
      for (size_t misalign : {size_t{0}, one_element(sd)}) {
        std::vector<HT> t;  // per parameter: p, g, m, v, denom
        t.reserve(sizes.size() * 5);
        for (int64_t n : sizes) {
          t.push_back(kt::random_tensor(sd, {n}, rng));
          t.push_back(kt::random_tensor(sd, {n}, rng));
          t.push_back(kt::random_tensor(sd, {n}, rng));
          t.push_back(kt::random_tensor(sd, {n}, rng, 0, 0.01));
          t.emplace_back(sd, std::vector<int64_t>{n});
        }
        std::vector<HT*> ins, outs;
        for (size_t k = 0; k < sizes.size(); ++k) {
          HT* p = &t[5 * k];
          ins.insert(ins.end(), {p, p + 1, p + 2, p + 3});
          outs.insert(outs.end(), {p, p + 2, p + 3});
          if (!fused) outs.push_back(p + 4);
        }
        const Both r =
            run_both(OpKind::kAdamW, ins, outs, {fused}, {1e-3, 0.9, 0.95, 1e-8, 0.1, 7}, misalign);
        for (size_t i = 0; i < outs.size(); ++i)
          expect_bits(r.gpu[i], r.cpu[i],
                      "adamw output " + std::to_string(i) + (fused ? " fused " : " foreach ") +
                          name(sd) + " +" + std::to_string(misalign) + "B");
      }
}

// kClipGradScale over 70 gradients (two launch batches of 64), fp32 and bf16 mixed, sizes at the
// chunk edges, in place as clip_grad_norm_ runs it; both sides of the clip threshold; bits.
TEST(CudaRowKernels, MultiTensorClipScaleIsBitExact) {
  std::mt19937 rng(44);
  std::vector<int64_t> sizes = {65535, 65536, 65537, 1, 9};
  for (int i = 0; i < 65; ++i) sizes.push_back(1 + (i * 7919) % 3000);
  std::vector<HT> grads;
  for (size_t i = 0; i < sizes.size(); ++i)
    grads.push_back(kt::random_tensor(i % 3 ? DType::kFloat32 : DType::kBFloat16, {sizes[i]}, rng));
  for (double total : {0.01, 400.0})
    for (size_t misalign : {size_t{0}, kEightBytes}) {
      HT t = kt::from_values(DType::kFloat32, {1}, {total});
      std::vector<HT*> ins = {&t}, outs;
      for (HT& g : grads) {
        ins.push_back(&g);
        outs.push_back(&g);
      }
      const Both r = run_both(OpKind::kClipGradScale, ins, outs, {}, {1.0}, misalign);
      for (size_t i = 0; i < outs.size(); ++i)
        expect_bits(r.gpu[i], r.cpu[i],
                    "clip gradient " + std::to_string(i) + " +" + std::to_string(misalign) + "B");
    }
}

}  // namespace

int main(int argc, char** argv) { return ckt::run_gpu_tests(argc, argv, "cuda_kernels_rows_test"); }
