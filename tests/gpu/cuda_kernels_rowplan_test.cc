// Launch planning of the memory-bound row and multi-tensor kernels (backends/cuda/kernels/plan.h),
// checked without a GPU: NOTE [Norm rows in registers] (plan::norm_vec gives every 8-element
// vector of a row exactly one thread, within the register budget) and NOTE [Multi-tensor AdamW]
// (plan::plan_multi_tensor gives every element of every tensor exactly one block, chunks start
// at multiples of the chunk size, so 8-element vectors stay aligned). The block-to-tensor lookup
// the kernels run (a binary search over first_block) is executed here as the device runs it.
// NOTE [One-pass log_softmax]'s online sum (online_softmax.h) runs here over the kernel's
// partition of a row against loss.cc's two-pass logsumexp.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cuda/kernels/online_softmax.h"
#include "backends/cuda/kernels/plan.h"
#include "core/common/error.h"

namespace fullshard::cuda {
namespace {

// The kernels' lookup (elementwise.cu batch_item, rows.cu chunk_item): the largest t with
// first[t] <= block.
int batch_item(const std::vector<int64_t>& first, int count, int64_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[static_cast<size_t>(mid)] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

TEST(CudaRowPlan, NormVecShapes) {
  EXPECT_EQ(plan::norm_vec(2048, 2).block, 256u);  // the 1B model: a thread per 8 elements
  EXPECT_EQ(plan::norm_vec(2048, 2).groups, 1);
  EXPECT_EQ(plan::norm_vec(16384, 2).groups, 2);
  EXPECT_EQ(plan::norm_vec(16384, 2).block, 1024u);
  EXPECT_EQ(plan::norm_vec(16392, 2).groups, 0);  // 2050 vectors need more than 2 x 1024 threads
  EXPECT_EQ(plan::norm_vec(16392, 4).groups, 4);
  EXPECT_EQ(plan::norm_vec(2047, 2).groups, 0);  // odd sizes take the scalar kernels
  EXPECT_EQ(plan::norm_vec(12, 2).groups, 0);
  EXPECT_EQ(plan::norm_vec(0, 2).groups, 0);
  EXPECT_EQ(plan::norm_vec(8, 2).block, 32u);
}

RC_GTEST_PROP(CudaRowPlan, NormVecGivesEveryVectorOneThread, ()) {
  const int64_t dim = *rc::gen::oneOf(
      rc::gen::inRange<int64_t>(1, 40000),
      rc::gen::map(rc::gen::inRange<int64_t>(1, 5000), [](int64_t v) { return 8 * v; }));
  const int max_groups = *rc::gen::element(1, 2, 4);
  const plan::NormVec v = plan::norm_vec(dim, max_groups);
  if (dim % 8 != 0 || dim / 8 > 1024 * max_groups) {
    RC_ASSERT(v.groups == 0);
    return;
  }
  RC_ASSERT(v.groups >= 1 && v.groups <= max_groups && (v.groups & (v.groups - 1)) == 0);
  RC_ASSERT(v.block >= 32u && v.block <= 1024u && v.block % 32 == 0);
  // Thread t, group k owns vector k * block + t (norm_rows.cuh): each vector once, none past the
  // row.
  std::vector<int> hits(static_cast<size_t>(dim / 8), 0);
  for (int k = 0; k < v.groups; ++k)
    for (unsigned t = 0; t < v.block; ++t) {
      const int64_t j = (static_cast<int64_t>(k) * v.block + t) * 8;
      if (j < dim) ++hits[static_cast<size_t>(j / 8)];
    }
  for (int h : hits) RC_ASSERT(h == 1);
  // No idle group: the last group has at least one vector.
  RC_ASSERT(static_cast<int64_t>(v.groups - 1) * v.block * 8 < dim);
}

RC_GTEST_PROP(CudaRowPlan, MultiTensorCoversEveryElementOnce, ()) {
  const auto numels = *rc::gen::container<std::vector<int64_t>>(
      rc::gen::oneOf(rc::gen::just<int64_t>(0), rc::gen::inRange<int64_t>(1, 40),
                     rc::gen::inRange<int64_t>(1, 5000)));
  const int64_t chunk = *rc::gen::element<int64_t>(8, 64, 256, 1000);
  const int max_tensors = *rc::gen::inRange(1, 40);
  const std::vector<plan::MultiTensorBatch> batches =
      plan::plan_multi_tensor(numels, chunk, max_tensors);
  std::vector<std::vector<int>> hits(numels.size());
  for (size_t i = 0; i < numels.size(); ++i) hits[i].assign(static_cast<size_t>(numels[i]), 0);
  int next = 0;
  for (const plan::MultiTensorBatch& b : batches) {
    RC_ASSERT(b.count >= 1 && b.count <= max_tensors && b.first >= next);
    RC_ASSERT(static_cast<int>(b.first_block.size()) == b.count + 1 && b.first_block[0] == 0);
    RC_ASSERT(b.first_block.back() > 0);  // no empty launch
    for (int t = next; t < b.first; ++t)
      RC_ASSERT(numels[static_cast<size_t>(t)] == 0);  // skipped: empty
    next = b.first + b.count;
    for (int64_t block = 0; block < b.first_block.back(); ++block) {
      const int t = batch_item(b.first_block, b.count, block);
      const int64_t n = numels[static_cast<size_t>(b.first + t)];
      const int64_t begin = (block - b.first_block[static_cast<size_t>(t)]) * chunk;
      RC_ASSERT(begin % chunk == 0 &&
                begin < n);  // chunk starts: multiples of chunk (vector alignment)
      for (int64_t i = begin; i < std::min(n, begin + chunk); ++i)
        ++hits[static_cast<size_t>(b.first + t)][static_cast<size_t>(i)];
    }
  }
  for (size_t t = static_cast<size_t>(next); t < numels.size(); ++t) RC_ASSERT(numels[t] == 0);
  for (const auto& h : hits)
    for (int c : h) RC_ASSERT(c == 1);
}

TEST(CudaRowPlan, MultiTensorBatchesTheModelsParameterList) {
  // 147 tensors (the 1B Llama's parameter list, as its one kAdamW op carries them) in 32-tensor
  // launches: 5 launches where the per-parameter kernel made 147.
  std::vector<int64_t> numels(147, 2048);
  numels[0] = 128256LL * 2048;
  EXPECT_EQ(plan::plan_multi_tensor(numels, 65536, 32).size(), 5u);
  EXPECT_TRUE(plan::plan_multi_tensor({0, 0, 0}, 65536, 32).empty());
  EXPECT_THROW(plan::plan_multi_tensor({1}, 0, 32), InternalError);
  EXPECT_THROW(plan::plan_multi_tensor({-1}, 8, 32), InternalError);
}

// The log_softmax kernel's logsumexp of a row (rows.cu): `threads` threads, thread t taking the
// 8-element vectors t, t + threads, ... in order, then the V % 8 tail elements t, t + threads, ...;
// the row max over the threads' maxima and the sum of their rescaled sums.
float kernel_lse(const std::vector<float>& x, int threads) {
  const int64_t V = static_cast<int64_t>(x.size()), body = V / 8 * 8;
  std::vector<OnlineSum> acc(static_cast<size_t>(threads));
  for (int64_t g = 0; g < body / 8; ++g)
    acc[static_cast<size_t>(g % threads)].add(&x[static_cast<size_t>(8 * g)], 8);
  for (int64_t j = body; j < V; ++j)
    acc[static_cast<size_t>((j - body) % threads)].add(&x[static_cast<size_t>(j)], 1);
  float mx = -INFINITY;
  for (const OnlineSum& a : acc) mx = std::fmax(mx, a.m);
  double sum = 0;
  for (const OnlineSum& a : acc) sum += a.scaled_to(mx);
  return mx + static_cast<float>(std::log(sum));
}

// loss.cc's: the max, then the double sum of expf(x - max).
float cpu_lse(const std::vector<float>& x) {
  float mx = x[0];
  for (float v : x) mx = std::max(mx, v);
  double sum = 0;
  for (float v : x) sum += std::exp(v - mx);
  return mx + static_cast<float>(std::log(sum));
}

std::vector<float> logits(int64_t V, std::mt19937& rng, double p_neg_inf) {
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::bernoulli_distribution masked(p_neg_inf);
  std::vector<float> x(static_cast<size_t>(V));
  for (float& v : x) v = masked(rng) ? -INFINITY : u(rng);
  return x;
}

// The op's tolerance on y = x - lse is 3.2e-5 absolute (docs/cuda-kernels.md): the logsumexp
// the kernel forms must be that close to the CPU's (it is typically within a few fp32 ulps).
TEST(CudaRowPlan, OnlineLogSumExpMatchesTheCpuAtTheModelsVocab) {
  std::mt19937 rng(45);
  double worst = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const std::vector<float> x = logits(128256, rng, trial == 2 ? 0.3 : 0.0);
    const float a = kernel_lse(x, static_cast<int>(plan::row_block(128256))), b = cpu_lse(x);
    worst = std::max(worst, static_cast<double>(std::fabs(a - b)));
  }
  std::printf("worst |lse - cpu lse| at V 128256: %.3g\n", worst);
  EXPECT_LE(worst, 3.2e-5);
  EXPECT_LE(worst, 8 * std::ldexp(1.0, -24) * 16) << "more than a few ulps of an lse near 16";
}

RC_GTEST_PROP(CudaRowPlan, OnlineLogSumExpMatchesTheCpu, ()) {
  const int64_t V = *rc::gen::inRange<int64_t>(1, 3000);
  const int threads = *rc::gen::element(32, 128, 1024);
  const double p_neg_inf = *rc::gen::element(0.0, 0.5, 0.95);
  std::mt19937 rng(static_cast<unsigned>(*rc::gen::inRange(0, 1 << 30)));
  std::vector<float> x = logits(V, rng, p_neg_inf);
  x[static_cast<size_t>(*rc::gen::inRange<int64_t>(0, V))] = 3.0f;  // at least one finite logit
  const float a = kernel_lse(x, threads), b = cpu_lse(x);
  RC_ASSERT(std::isfinite(a));
  RC_ASSERT(std::fabs(a - b) <= 3.2e-5);
}

TEST(CudaRowPlan, OnlineLogSumExpOfARowOfMinusInfinityIsNotFinite) {
  // The CPU gets NaN (expf(-inf - -inf)); the kernel -inf, and y = x - lse is NaN on both sides.
  const std::vector<float> x(20, -INFINITY);
  EXPECT_FALSE(std::isfinite(kernel_lse(x, 32)));
  EXPECT_TRUE(std::isnan(x[0] - kernel_lse(x, 32)));
  EXPECT_TRUE(std::isnan(x[0] - cpu_lse(x)));
}

}  // namespace
}  // namespace fullshard::cuda
