// CPU kernels of DeepSeek-V3's aux-loss-free load balancing and group-limited routing
// (backends/cpu/kernels/moe_load_balance.cc, NOTE [Expert bias] in core/model/expert_bias.h),
// each against a double-precision reference written from torchtitan's Python (moe.py and
// optimizer.py at pytorch/torchtitan@2aac20a) over random shapes. Scores are drawn from a few
// binary fractions, so sums are exact in fp32 and ties between groups happen.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/common/kernel_families.h"
#include "core/runtime/op_table.h"
#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

// _get_node_limited_routing_scores on scores + bias: [N, G, E/G], the top-2 sum per group,
// the best `limited` groups kept (equal sums: the lower group), the rest -inf.
Vec choice_ref(const Vec& s, const Vec& bias, int N, int E, int G, int limited) {
  Vec y(s.size());
  const int per = E / G;
  for (int n = 0; n < N; ++n) {
    for (int e = 0; e < E; ++e) y[n * E + e] = s[n * E + e] + (bias.empty() ? 0.0 : bias[e]);
    if (G == 1) continue;
    std::vector<double> score(static_cast<size_t>(G));
    for (int g = 0; g < G; ++g) {
      Vec v(y.begin() + n * E + g * per, y.begin() + n * E + (g + 1) * per);
      std::sort(v.begin(), v.end(), std::greater<>());
      score[g] = v[0] + v[1];
    }
    std::vector<int> order(static_cast<size_t>(G));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
    for (int r = limited; r < G; ++r)
      for (int j = 0; j < per; ++j)
        y[n * E + order[r] * per + j] = -std::numeric_limits<double>::infinity();
  }
  return y;
}

HT fractions(Shape shape, std::mt19937& rng, int denominator) {
  HT t(DType::kFloat32, std::move(shape));
  std::uniform_int_distribution<int> u(0, denominator);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(u(rng)) / denominator);
  return t;
}

}  // namespace

RC_GTEST_PROP(KernelsMoeLoadBalance, RouterChoiceAddsTheBiasAndMasksAllButTheBestGroups, ()) {
  const int N = *rc::gen::inRange(0, 12), G = *rc::gen::inRange(1, 5);
  const int per = *rc::gen::inRange(2, 5), E = G * per;
  const int limited = *rc::gen::inRange(1, G + 1);
  const bool with_bias = *rc::gen::arbitrary<bool>();
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT s = fractions({N, E}, rng, 8), bias = fractions({E}, rng, 16), y(DType::kFloat32, {N, E});
  std::vector<HT*> in{&s};
  if (with_bias) in.push_back(&bias);
  run(OpKind::kRouterChoice, in, {&y}, {N, E, G, limited});
  RC_ASSERT(y.values() == choice_ref(s.values(), with_bias ? bias.values() : Vec{}, N, E, G,
                                     limited));
}

// The top-k over the choice, then the unbiased scores gathered at the chosen experts: the bias
// moves the choice and never the gate value.
RC_GTEST_PROP(KernelsMoeLoadBalance, GatherTakesTheUnbiasedScoresOfTheBiasedChoice, ()) {
  const int N = *rc::gen::inRange(1, 10), E = *rc::gen::inRange(2, 13);
  const int K = *rc::gen::inRange(1, E + 1);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT s = fractions({N, E}, rng, 8), bias = fractions({E}, rng, 4), choice(DType::kFloat32, {N, E});
  run(OpKind::kRouterChoice, {&s, &bias}, {&choice}, {N, E, 1, 1});
  HT discarded(DType::kFloat32, {N, K}), idx(DType::kInt64, {N, K}), g(DType::kFloat32, {N, K});
  run(OpKind::kTopK, {&choice}, {&discarded, &idx}, {N, E, K});
  run(OpKind::kGatherScores, {&s, &idx}, {&g}, {N, E, K});
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const auto e = static_cast<int>(idx.get(n * K + k));
      RC_ASSERT(g.get(n * K + k) == s.get(n * E + e));
      RC_ASSERT(discarded.get(n * K + k) == s.get(n * E + e) + bias.get(e));
    }
}

RC_GTEST_PROP(KernelsMoeLoadBalance, StackAndBiasUpdateFollowTorchtitan, ()) {
  const int L = *rc::gen::inRange(1, 5), E = *rc::gen::inRange(1, 9);
  const double coeff = *rc::gen::element(1e-3, 0.25, 1.0);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(0, 40);
  std::vector<HT> counts, biases;
  std::vector<int64_t> iargs{L, E};
  for (int l = 0; l < L; ++l) {
    counts.emplace_back(DType::kFloat32, Shape{E});
    for (int e = 0; e < E; ++e) counts.back().set(e, u(rng));
    biases.push_back(fractions({E}, rng, 64));
    iargs.push_back(*rc::gen::inRange(1, 3));  // 2: a recomputed layer
  }
  HT loads(DType::kFloat32, {L, E});
  std::vector<HT*> cin;
  for (HT& c : counts) cin.push_back(&c);
  run(OpKind::kExpertLoadStack, cin, {&loads}, iargs, {coeff});
  Vec want_loads, want_bias;
  for (int l = 0; l < L; ++l) {
    for (int e = 0; e < E; ++e) want_loads.push_back(std::floor(counts[l].get(e) / iargs[2 + l]));
  }
  RC_ASSERT(loads.values() == want_loads);
  for (int l = 0; l < L; ++l) {  // expert_bias += d - mean(d), d = coeff sign(mean - load)
    double mean = 0, dmean = 0;
    for (int e = 0; e < E; ++e) mean += want_loads[l * E + e] / E;
    Vec d;
    for (int e = 0; e < E; ++e) {
      const double diff = mean - want_loads[l * E + e];
      d.push_back(coeff * (diff > 0 ? 1 : diff < 0 ? -1 : 0));
      dmean += d.back() / E;
    }
    for (int e = 0; e < E; ++e) want_bias.push_back(biases[l].get(e) + d[e] - dmean);
  }
  std::vector<HT*> in{&loads}, out;
  for (HT& b : biases) in.push_back(&b), out.push_back(&b);
  for (HT& c : counts) in.push_back(&c), out.push_back(&c);
  run(OpKind::kExpertBiasUpdate, in, out, iargs, {coeff});
  Vec got_bias;
  for (HT& b : biases)
    for (double v : b.values()) got_bias.push_back(v);
  KT_RC_CLOSE(got_bias, want_bias, 1e-6, 1e-6);
  for (HT& c : counts) RC_ASSERT(c.values() == Vec(static_cast<size_t>(E), 0.0));
}

// Hugging Face's auxiliary load-balancing loss (backends/cpu/kernels/moe_aux_loss.cc, NOTE
// [Auxiliary load-balancing loss] in core/model/moe_aux_loss.h): the column sums, the loss term
// and its gradient, exact on binary fractions and integer counts.
RC_GTEST_PROP(KernelsMoeLoadBalance, AuxLossKernelsSumAddAndBroadcast, ()) {
  const int N = *rc::gen::inRange(0, 12), E = *rc::gen::inRange(1, 9);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(0, 30);
  HT s = fractions({N, E}, rng, 8), acc = fractions({E}, rng, 4), counts(DType::kFloat32, {E});
  for (int e = 0; e < E; ++e) counts.set(e, u(rng));
  Vec want = acc.values();
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) want[static_cast<size_t>(e)] += s.get(n * E + e);
  run(OpKind::kAddSumRows, {&s, &acc}, {&acc}, {N, E}, {0.0});
  RC_ASSERT(acc.values() == want);
  HT loss(DType::kFloat32, {1});
  loss.set(0, 1.5);
  double dot = 0;
  for (int e = 0; e < E; ++e) dot += counts.get(e) * acc.get(e);
  run(OpKind::kMoeAuxLoss, {&counts, &acc, &loss}, {&loss}, {N, E}, {0.25});
  KT_RC_CLOSE(loss.values(), Vec{1.5 + 0.25 * dot}, 1e-6, 1e-6);
  HT g = fractions({N, E}, rng, 8), gx(DType::kFloat32, {N, E});
  run(OpKind::kMoeAuxLossBackward, {&g, &counts}, {&gx}, {N, E}, {0.125});
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e)
      RC_ASSERT(gx.get(n * E + e) == g.get(n * E + e) + 0.125 * counts.get(e));
  HT other(DType::kFloat32, {E});
  RC_ASSERT_THROWS_AS(run(OpKind::kAddSumRows, {&s, &acc}, {&other}, {N, E}, {0.0}),
                      InternalError);  // not in place
}

// One overloaded expert: its bias falls, the idle ones' rise, the bias keeps a zero mean.
TEST(KernelsMoeLoadBalance, TheHotExpertsBiasFalls) {
  HT load(DType::kFloat32, {1, 4}), bias(DType::kFloat32, {4}), tokens(DType::kFloat32, {4});
  for (int e = 0; e < 4; ++e) load.set(e, e == 2 ? 100 : 10);
  run(OpKind::kExpertBiasUpdate, {&load, &bias, &tokens}, {&bias, &tokens}, {1, 4, 1}, {1e-3});
  EXPECT_LT(bias.get(2), 0);
  for (int e : {0, 1, 3}) EXPECT_GT(bias.get(e), 0);
  EXPECT_NEAR(bias.get(0) + bias.get(1) + bias.get(2) + bias.get(3), 0, 1e-9);
}

// The CPU runs every load-balance kind; their operands are core's checks.
TEST(KernelsMoeLoadBalance, EveryKindHasACpuKernelAndDecodesItsOperands) {
  int n = 0;
  for (size_t i = 0; i < kOpKindCount; ++i) {
    const auto k = static_cast<OpKind>(i);
    if (!backends::is_load_balance_kind(k)) continue;
    ++n;
    EXPECT_TRUE(cpu::has_kernel(k)) << op_kind_name(k);
  }
  EXPECT_EQ(n, 7);
  HT s(DType::kFloat32, {2, 6}), y(DType::kFloat32, {2, 6});
  EXPECT_THROW(run(OpKind::kRouterChoice, {&s}, {&y}, {2, 6, 4, 1}), InternalError);  // 4 ∤ 6
  EXPECT_THROW(run(OpKind::kRouterChoice, {&s}, {&y}, {2, 6, 6, 1}), InternalError);  // 1 each
  HT load(DType::kFloat32, {1, 6}), b(DType::kFloat32, {6}), c(DType::kFloat32, {6}),
      other(DType::kFloat32, {6});
  EXPECT_THROW(run(OpKind::kExpertBiasUpdate, {&load, &b, &c}, {&other, &c}, {1, 6, 1}, {1e-3}),
               InternalError);  // not in place
}
