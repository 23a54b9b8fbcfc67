// CPU kernels of the mixture-of-experts kinds (backends/cpu/kernels/moe_*.cc, docs/moe.md):
// each against a double-precision reference over random shapes and storage dtypes (bf16 where
// the model stores it), backwards against central finite differences of sum(g * f(...)) over
// the reference, and the ep = 1 layer chain as core/model/moe_layer.cc launches it (permute,
// gather, grouped GEMMs, unpermute, unsort, combine) against each token's experts run directly.
#include <algorithm>
#include <map>
#include <numeric>

#include "backends/common/kernel_families.h"
#include "core/runtime/op_table.h"
#include "tests/unit/kernels_test_support.h"

using namespace kt;

namespace {

Vec softmax_ref(const Vec& x, int N, int E) {
  Vec y(x.size());
  for (int n = 0; n < N; ++n) {
    double m = -1e300, s = 0;
    for (int e = 0; e < E; ++e) m = std::max(m, x[n * E + e]);
    for (int e = 0; e < E; ++e) s += std::exp(x[n * E + e] - m);
    for (int e = 0; e < E; ++e) y[n * E + e] = std::exp(x[n * E + e] - m) / s;
  }
  return y;
}

Vec sigmoid_ref(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = 1 / (1 + std::exp(-x[i]));
  return y;
}

Vec route_norm_ref(const Vec& s, int N, int K) {
  Vec y(s.size());
  for (int n = 0; n < N; ++n) {
    double d = 1e-20;
    for (int k = 0; k < K; ++k) d += s[n * K + k];
    for (int k = 0; k < K; ++k) y[n * K + k] = s[n * K + k] / d;
  }
  return y;
}

// out[n, d] = sum_k w[n, k] y[n, k, d]
Vec weighted_sum_ref(const Vec& w, const Vec& y, int N, int K, int D) {
  Vec o(static_cast<size_t>(N * D), 0.0);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int d = 0; d < D; ++d) o[n * D + d] += w[n * K + k] * y[(n * K + k) * D + d];
  return o;
}

// y[r] = x[r] w[e]^T over group e's rows, zero past the last offset.
Vec grouped_mm_ref(const Vec& x, const Vec& w, const std::vector<int64_t>& offs, int P, int K,
                   int N) {
  Vec y(static_cast<size_t>(P * N), 0.0);
  int64_t begin = 0;
  for (size_t e = 0; e < offs.size(); ++e) {
    for (int64_t r = begin; r < offs[e]; ++r)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += x[r * K + k] * w[(e * N + j) * K + k];
        y[r * N + j] = s;
      }
    begin = offs[e];
  }
  return y;
}

// Random non-decreasing group ends within P rows (empty groups and uncovered rows included).
std::vector<int64_t> random_offsets(int E, int P) {
  std::vector<int64_t> o;
  for (int e = 0; e < E; ++e) o.push_back(*rc::gen::inRange(0, P + 1));
  std::sort(o.begin(), o.end());
  return o;
}

HT index_tensor(const std::vector<int64_t>& v) {
  HT t(DType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return t;
}

}  // namespace

RC_GTEST_PROP(KernelsMoe, SoftmaxSigmoidAndBackwards, ()) {
  const DType dt = *gen_float_dtype();
  const int N = *rc::gen::inRange(1, 9), E = *rc::gen::inRange(1, 17);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {N, E}, rng, -3, 3), y(dt, {N, E}), g = random_tensor(dt, {N, E}, rng),
     gx(dt, {N, E});
  const Vec xv = x.values(), gv = g.values();
  const double tol = rel_eps(dt) + 1e-5;
  const std::vector<int64_t> args = {N, E, 0};
  for (bool soft : {true, false}) {
    auto f = [&](const Vec& v) { return soft ? softmax_ref(v, N, E) : sigmoid_ref(v); };
    run(soft ? OpKind::kSoftmax : OpKind::kSigmoid, {&x}, {&y}, args);
    KT_RC_CLOSE(y.values(), f(xv), 1e-6, tol);
    // The backward from the saved output, as the node runs it; the output the kernel wrote is
    // rounded to dt, so the reference starts from it too where that matters (bf16).
    run(soft ? OpKind::kSoftmaxBackward : OpKind::kSigmoidBackward, {&g, &y}, {&gx}, args);
    KT_RC_CLOSE(gx.values(), fd_grad(f, xv, gv), 4 * rel_eps(dt) + 1e-5, 4 * rel_eps(dt) + 1e-4);
  }
}

RC_GTEST_PROP(KernelsMoe, TopKAndBackward, ()) {
  const int N = *rc::gen::inRange(1, 9), E = *rc::gen::inRange(1, 17);
  const int K = *rc::gen::inRange(1, E + 1);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT s(DType::kFloat32, {N, E}), v(DType::kFloat32, {N, K}), idx(DType::kInt64, {N, K});
  // Few distinct values, so ties happen: the lower expert comes first among equals.
  std::uniform_int_distribution<int> u(0, 4);
  for (int i = 0; i < N * E; ++i) s.set(i, 0.25 * u(rng));
  run(OpKind::kTopK, {&s}, {&v, &idx}, {N, E, K});
  for (int n = 0; n < N; ++n) {
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return s.get(n * E + a) > s.get(n * E + b); });
    for (int k = 0; k < K; ++k) {
      RC_ASSERT(idx.get(n * K + k) == order[k]);
      RC_ASSERT(v.get(n * K + k) == s.get(n * E + order[k]));
    }
  }
  HT g = random_tensor(DType::kFloat32, {N, K}, rng), gs(DType::kFloat32, {N, E});
  run(OpKind::kTopKBackward, {&g, &idx}, {&gs}, {N, E, K});
  Vec e(static_cast<size_t>(N * E), 0.0);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) e[n * E + static_cast<int>(idx.get(n * K + k))] = g.get(n * K + k);
  RC_ASSERT(gs.values() == e);
}

RC_GTEST_PROP(KernelsMoe, RouteNormAndBackward, ()) {
  const int N = *rc::gen::inRange(1, 9), K = *rc::gen::inRange(1, 9);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT s = random_tensor(DType::kFloat32, {N, K}, rng, 0.05, 1.0), y(DType::kFloat32, {N, K}),
     d(DType::kFloat32, {N, 1});
  run(OpKind::kRouteNorm, {&s}, {&y, &d}, {N, K, K});
  const Vec sv = s.values();
  KT_RC_CLOSE(y.values(), route_norm_ref(sv, N, K), 1e-7, 1e-6);
  for (int n = 0; n < N; ++n) {
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += sv[n * K + k];
    RC_ASSERT(std::abs(d.get(n) - sum) <= 1e-6 * sum);
  }
  HT g = random_tensor(DType::kFloat32, {N, K}, rng), gs(DType::kFloat32, {N, K});
  run(OpKind::kRouteNormBackward, {&g, &s, &d}, {&gs}, {N, K, K});
  const Vec fd = fd_grad([&](const Vec& v) { return route_norm_ref(v, N, K); }, sv, g.values());
  KT_RC_CLOSE(gs.values(), fd, 1e-4, 1e-4);
}

RC_GTEST_PROP(KernelsMoe, HistogramCountsChosenExperts, ()) {
  const int N = *rc::gen::inRange(0, 20), E = *rc::gen::inRange(1, 9);
  const int K = *rc::gen::inRange(1, E + 1);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(0, E - 1);
  HT idx(DType::kInt64, {N, K}), c(DType::kFloat32, {E});
  Vec e(static_cast<size_t>(E), 0.0);
  for (int i = 0; i < N * K; ++i) {
    const int v = u(rng);
    idx.set(i, v);
    e[v] += 1;
  }
  run(OpKind::kHistogram, {&idx}, {&c}, {N, E, K});
  RC_ASSERT(c.values() == e);
}

// Capacity (NOTE [Capacity factor] in core/model/moe_routing.h): each expert keeps `cap` of its slots, the highest scores first (ties to
// the lower token) or the first tokens; the rest point at E. Scores from a few values, so ties
// happen; each token's top-k experts distinct, as topk gives them; some experts get none.
RC_GTEST_PROP(KernelsMoe, ExpertCapacityKeepsTheBestSlotsPerExpert, ()) {
  const int N = *rc::gen::inRange(0, 24), E = *rc::gen::inRange(1, 7);
  const int K = *rc::gen::inRange(1, E + 1), cap = *rc::gen::inRange(0, N + 2);
  const int policy = *rc::gen::inRange(0, 2);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT sc(DType::kFloat32, {N, K}), idx(DType::kInt64, {N, K}), y(DType::kInt64, {N, K});
  for (int n = 0; n < N; ++n) {
    const int pool = n % 2 == 1 && K < E ? E - 1 : E;  // odd tokens leave expert E - 1 alone
    std::vector<int> experts(static_cast<size_t>(pool));
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int k = 0; k < K; ++k) {
      idx.set(n * K + k, experts[k]);
      sc.set(n * K + k, static_cast<double>(rng() % 4) / 4);
    }
  }
  run(OpKind::kExpertCapacity, {&sc, &idx}, {&y}, {N, E, K, cap, policy});
  std::vector<int64_t> kept(static_cast<size_t>(E), 0), had(static_cast<size_t>(E), 0);
  for (int i = 0; i < N * K; ++i) {
    const auto e = static_cast<int64_t>(idx.get(i));
    int ahead = 0;
    for (int j = 0; j < N * K; ++j)
      if (j != i && static_cast<int64_t>(idx.get(j)) == e &&
          (policy == 1 ? j < i
                       : (sc.get(j) > sc.get(i) || (sc.get(j) == sc.get(i) && j < i))))
        ++ahead;
    RC_ASSERT(static_cast<int64_t>(y.get(i)) == (ahead < cap ? e : E));
    ++had[e];
    if (ahead < cap) ++kept[e];
  }
  for (int e = 0; e < E; ++e) RC_ASSERT(kept[e] == std::min<int64_t>(had[e], cap));
}

RC_GTEST_PROP(KernelsMoe, WeightedSumAndBackward, ()) {
  const DType dt = *gen_float_dtype();
  const int N = *rc::gen::inRange(1, 6), K = *rc::gen::inRange(1, 4), D = *rc::gen::inRange(1, 9);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT w = random_tensor(DType::kFloat32, {N, K}, rng), y = random_tensor(dt, {N, K, D}, rng),
     o(dt, {N, D});
  const Vec wv = w.values(), yv = y.values();
  run(OpKind::kWeightedSum, {&w, &y}, {&o}, {N, K, K});
  KT_RC_CLOSE(o.values(), weighted_sum_ref(wv, yv, N, K, D), 1e-6, rel_eps(dt) + 1e-6);
  HT g = random_tensor(dt, {N, D}, rng), gw(DType::kFloat32, {N, K}), gy(dt, {N, K, D});
  run(OpKind::kWeightedSumBackward, {&g, &w, &y}, {&gw, &gy}, {N, K, K});
  const Vec gv = g.values();
  KT_RC_CLOSE(gw.values(),
              fd_grad([&](const Vec& v) { return weighted_sum_ref(v, yv, N, K, D); }, wv, gv), 1e-4,
              1e-4);
  KT_RC_CLOSE(gy.values(),
              fd_grad([&](const Vec& v) { return weighted_sum_ref(wv, v, N, K, D); }, yv, gv), 1e-4,
              rel_eps(dt) + 1e-4);
}

RC_GTEST_PROP(KernelsMoe, ArgsortIsStableAndFloorDivides, ()) {
  const int n = *rc::gen::inRange(0, 40), E = *rc::gen::inRange(1, 6);
  const int64_t div = *rc::gen::inRange(1, 5);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(0, E - 1);
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (auto& k : keys) k = u(rng);
  HT x = index_tensor(keys), order(DType::kInt64, {n});
  run(OpKind::kArgsort, {&x}, {&order}, {n, 1, 1});
  std::vector<int64_t> got(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) got[i] = static_cast<int64_t>(order.get(i));
  // A permutation, keys non-decreasing along it, equal keys in their original order.
  std::vector<int64_t> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) RC_ASSERT(sorted[i] == i);
  for (int i = 1; i < n; ++i)
    RC_ASSERT(keys[got[i - 1]] < keys[got[i]] ||
              (keys[got[i - 1]] == keys[got[i]] && got[i - 1] < got[i]));
  // Floor division, negatives rounding down as Python's //.
  std::vector<int64_t> vals = keys;
  for (auto& v : vals) v -= 2;
  HT a = index_tensor(vals), q(DType::kInt64, {n});
  run(OpKind::kFloorDivide, {&a}, {&q}, {n, 1, div});
  for (int i = 0; i < n; ++i)
    RC_ASSERT(q.get(i) == std::floor(static_cast<double>(vals[i]) / static_cast<double>(div)));
}

RC_GTEST_PROP(KernelsMoe, GatherScatterIndexAddPadRows, ()) {
  const DType dt = *rc::gen::element(DType::kFloat32, DType::kBFloat16, DType::kInt64);
  const int R = *rc::gen::inRange(1, 9), W = *rc::gen::inRange(1, 6), M = *rc::gen::inRange(0, 12);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::uniform_int_distribution<int> u(-R, R - 1);  // negative: from the end
  std::vector<int64_t> index(static_cast<size_t>(M));
  for (auto& i : index) i = u(rng);
  auto row = [R](int64_t i) { return i < 0 ? i + R : i; };
  HT idx = index_tensor(index);
  HT x = random_tensor(dt == DType::kInt64 ? DType::kFloat32 : dt, {R, W}, rng);
  if (dt == DType::kInt64) {
    HT xi(DType::kInt64, {R, W});
    for (int i = 0; i < R * W; ++i) xi.set(i, i * 7 - 3);
    x = xi;
  }
  HT y(x.meta.dtype, {M, W});
  run(OpKind::kGatherRows, {&x, &idx}, {&y}, {R, W, 1});
  for (int m = 0; m < M; ++m)
    for (int w = 0; w < W; ++w) RC_ASSERT(y.get(m * W + w) == x.get(row(index[m]) * W + w));
  // Scatter: zeros, then each source row to its index, the later one winning.
  HT sc(x.meta.dtype, {R, W});
  run(OpKind::kScatterRows, {&y, &idx}, {&sc}, {R, W, 1});
  Vec e(static_cast<size_t>(R * W), 0.0);
  for (int m = 0; m < M; ++m)
    for (int w = 0; w < W; ++w) e[row(index[m]) * W + w] = y.get(m * W + w);
  RC_ASSERT(sc.values() == e);
  // Pad: the rows, then zero rows (one for pad_row, any number for slice_rows' backward).
  const int pad = *rc::gen::inRange(0, 4);
  HT p(x.meta.dtype, {R + pad, W});
  p.set_values(Vec(static_cast<size_t>((R + pad) * W), 5.0));
  run(OpKind::kPadRow, {&x}, {&p}, {R, W, 1});
  Vec pe = x.values();
  pe.resize(static_cast<size_t>((R + pad) * W), 0.0);
  RC_ASSERT(p.values() == pe);
  if (dt == DType::kInt64) return;  // index-add sums floating gradients
  HT gy = random_tensor(dt, {M, W}, rng), acc(dt, {R, W});
  run(OpKind::kIndexAddRows, {&gy, &idx}, {&acc}, {R, W, 1});
  Vec ea(static_cast<size_t>(R * W), 0.0);
  for (int m = 0; m < M; ++m)
    for (int w = 0; w < W; ++w) ea[row(index[m]) * W + w] += gy.get(m * W + w);
  KT_RC_CLOSE(acc.values(), ea, 1e-6, rel_eps(dt) + 1e-6);
}

// generate_permute_indices, as torchtitan's fill_indices_cpu writes it: counts [ranks * E]
// (sender-major, as expert parallelism receives them; one sender at ep = 1), group e (of
// max(its total, align) rows rounded up to align) lists each sender's rows for e in sender order
// (rows numbered as the senders' chunks lie), then -1; -1 to the end.
RC_GTEST_PROP(KernelsMoe, PermuteIndicesPadsEachGroup, ()) {
  const int E = *rc::gen::inRange(1, 7), align = *rc::gen::element(1, 2, 8);
  const int ranks = *rc::gen::element(1, 1, 2, 3), T = *rc::gen::inRange(0, 40);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::vector<int64_t> counts(static_cast<size_t>(ranks * E), 0);
  std::uniform_int_distribution<int> u(0, ranks * E - 1);
  for (int t = 0; t < T; ++t) ++counts[u(rng)];  // empty experts happen
  HT c(DType::kFloat32, {ranks * E});
  for (int i = 0; i < ranks * E; ++i) c.set(i, static_cast<double>(counts[i]));
  const int64_t P = (T + E * align + align - 1) / align * align;
  HT perm(DType::kInt64, {P}), offs(DType::kInt64, {E});
  run(OpKind::kPermuteIndices, {&c}, {&perm, &offs}, {T, E, align});
  std::vector<int64_t> start(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) start[i] = start[i - 1] + counts[i - 1];
  std::vector<int64_t> want(static_cast<size_t>(P), -1), want_offs;
  int64_t end = 0;
  for (int e = 0; e < E; ++e) {
    int64_t write = end, total = 0;
    for (int r = 0; r < ranks; ++r) {
      const int i = r * E + e;
      for (int64_t t = 0; t < counts[i]; ++t) want[write++] = start[i] + t;
      total += counts[i];
    }
    end += (std::max<int64_t>(total, align) + align - 1) / align * align;
    want_offs.push_back(end);
  }
  for (int64_t i = 0; i < P; ++i) RC_ASSERT(static_cast<int64_t>(perm.get(i)) == want[i]);
  for (int e = 0; e < E; ++e) RC_ASSERT(static_cast<int64_t>(offs.get(e)) == want_offs[e]);
}

RC_GTEST_PROP(KernelsMoe, GroupedMmAndBackwards, ()) {
  const DType dt = *rc::gen::element(DType::kFloat32, DType::kBFloat16);
  const int E = *rc::gen::inRange(1, 5), P = *rc::gen::inRange(0, 14);
  const int K = *rc::gen::inRange(1, 7), N = *rc::gen::inRange(1, 7);
  const std::vector<int64_t> o = random_offsets(E, P);
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(dt, {P, K}, rng), w = random_tensor(dt, {E, N, K}, rng), y(dt, {P, N});
  HT offs = index_tensor(o);
  const std::vector<int64_t> args = {P, K, N, E, o.back()};
  run(OpKind::kGroupedMM, {&x, &w, &offs}, {&y}, args);
  const Vec xv = x.values(), wv = w.values();
  KT_RC_CLOSE(y.values(), grouped_mm_ref(xv, wv, o, P, K, N), 1e-5, rel_eps(dt) + 1e-5);
  HT g = random_tensor(dt, {P, N}, rng), gx(dt, {P, K}), gw(DType::kFloat32, {E, N, K});
  run(OpKind::kGroupedMMBackwardInput, {&g, &w, &offs}, {&gx}, args);
  run(OpKind::kGroupedMMBackwardWeight, {&g, &x, &offs}, {&gw}, args);
  const Vec gv = g.values();
  KT_RC_CLOSE(gx.values(),
              fd_grad([&](const Vec& v) { return grouped_mm_ref(v, wv, o, P, K, N); }, xv, gv),
              1e-4, rel_eps(dt) + 1e-4);
  KT_RC_CLOSE(gw.values(),
              fd_grad([&](const Vec& v) { return grouped_mm_ref(xv, v, o, P, K, N); }, wv, gv),
              1e-4, 1e-4);
}

// The ep = 1 routed-experts chain of NOTE [MoE op sequence], kernel by kernel (fp32): histogram,
// stable argsort, token indices, routed input, vstack, permutation, gather, w1 / w3 / w2 grouped
// GEMMs with silu * mul, unpermute, drop the pad row, unsort, weighted combine; against
// out[n] = sum_k score[n, k] w2_e (silu(w1_e x_n) * w3_e x_n) with e the token's k-th expert.
RC_GTEST_PROP(KernelsMoe, RoutedExpertsChainMatchesPerTokenExperts, ()) {
  const int E = *rc::gen::inRange(1, 5), K = *rc::gen::inRange(1, E + 1);
  const int T = *rc::gen::inRange(1, 9), D = *rc::gen::inRange(1, 6), F = *rc::gen::inRange(1, 6);
  const int align = *rc::gen::element(1, 8);
  const DType f32 = DType::kFloat32;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  HT x = random_tensor(f32, {T, D}, rng), logits = random_tensor(f32, {T, E}, rng, -2, 2);
  HT w1 = random_tensor(f32, {E, F, D}, rng), w3 = random_tensor(f32, {E, F, D}, rng),
     w2 = random_tensor(f32, {E, D, F}, rng);
  HT probs(f32, {T, E}), top(f32, {T, K}), sel(DType::kInt64, {T, K}), counts(f32, {E});
  run(OpKind::kSoftmax, {&logits}, {&probs}, {T, E, 0});
  run(OpKind::kTopK, {&probs}, {&top, &sel}, {T, E, K});
  run(OpKind::kHistogram, {&sel}, {&counts}, {T, E, K});
  const int R = T * K;
  HT order(DType::kInt64, {R}), tok(DType::kInt64, {R}), routed(f32, {R, D}),
      padded(f32, {R + 1, D});
  run(OpKind::kArgsort, {&sel}, {&order}, {R, 1, 1});
  run(OpKind::kFloorDivide, {&order}, {&tok}, {R, 1, K});
  run(OpKind::kGatherRows, {&x, &tok}, {&routed}, {T, D, 1});
  run(OpKind::kPadRow, {&routed}, {&padded}, {R, D, 1});
  const int64_t P = (R + E * align + align - 1) / align * align;
  HT perm(DType::kInt64, {P}), offs(DType::kInt64, {E}), xe(f32, {P, D});
  run(OpKind::kPermuteIndices, {&counts}, {&perm, &offs}, {R, E, align});
  run(OpKind::kGatherRows, {&padded, &perm}, {&xe}, {R + 1, D, 1});
  HT h1(f32, {P, F}), h3(f32, {P, F}), h(f32, {P, F}), ye(f32, {P, D});
  const int64_t computed = static_cast<int64_t>(offs.get(E - 1));
  run(OpKind::kGroupedMM, {&xe, &w1, &offs}, {&h1}, {P, D, F, E, computed});
  run(OpKind::kGroupedMM, {&xe, &w3, &offs}, {&h3}, {P, D, F, E, computed});
  for (int64_t i = 0; i < P * F; ++i) {
    const double a = h1.get(i);
    h.set(i, a / (1 + std::exp(-a)) * h3.get(i));
  }
  run(OpKind::kGroupedMM, {&h, &w2, &offs}, {&ye}, {P, F, D, E, computed});
  HT unperm(f32, {R + 1, D}), unsorted(f32, {R, D}), out(f32, {T, D});
  run(OpKind::kScatterRows, {&ye, &perm}, {&unperm}, {R + 1, D, 1});
  HT sliced(f32, {R, D});
  for (int64_t i = 0; i < R * D; ++i) sliced.set(i, unperm.get(i));
  run(OpKind::kScatterRows, {&sliced, &order}, {&unsorted}, {R, D, 1});
  run(OpKind::kWeightedSum, {&top, &unsorted}, {&out}, {T, K, K});
  Vec want(static_cast<size_t>(T * D), 0.0);
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) {
      const int e = static_cast<int>(sel.get(t * K + k));
      Vec hid(static_cast<size_t>(F));
      for (int j = 0; j < F; ++j) {
        double a = 0, b = 0;
        for (int d = 0; d < D; ++d) {
          a += w1.get((e * F + j) * D + d) * x.get(t * D + d);
          b += w3.get((e * F + j) * D + d) * x.get(t * D + d);
        }
        hid[j] = a / (1 + std::exp(-a)) * b;
      }
      for (int d = 0; d < D; ++d) {
        double s = 0;
        for (int j = 0; j < F; ++j) s += w2.get((e * D + d) * F + j) * hid[j];
        want[t * D + d] += top.get(t * K + k) * s;
      }
    }
  KT_RC_CLOSE(out.values(), want, 1e-5, 1e-4);
}

// Every MoE kind is on the CPU's kernel list and reaches its kernel (its decoder refuses the
// empty op, naming it), though the op table still marks it simulator-only.
TEST(KernelsMoe, EveryMoeKindIsListedAndReachesItsKernel) {
  int moe = 0;
  for (size_t i = 0; i < kOpKindCount; ++i) {
    const auto k = static_cast<OpKind>(i);
    if (!backends::is_moe_kind(k)) continue;
    EXPECT_TRUE(cpu::has_kernel(k)) << op_kind_name(k);
    ++moe;
    OpCall op;
    op.kind = k;
    op.name = "empty";
    try {
      cpu::run_kernel(op, {}, {});
      ADD_FAILURE() << op_kind_name(k) << " ran without operands";
    } catch (const InternalError& e) {
      EXPECT_EQ(std::string(e.what()).find("no CPU kernel"), std::string::npos)
          << op_kind_name(k) << ": " << e.what();
    }
  }
  EXPECT_EQ(moe, 22);  // kExpertCapacity (NOTE [Capacity factor]) is the 22nd
  EXPECT_TRUE(cpu::has_kernel(OpKind::kGroupedMMBackwardWeight));
  EXPECT_FALSE(cpu::has_kernel(OpKind::kAllGatherMatmul));  // still simulator-only
}

TEST(KernelsMoe, BadIndicesAreInternalErrors) {
  HT x(DType::kFloat32, {3, 2}), y(DType::kFloat32, {1, 2});
  HT idx = index_tensor({3});
  EXPECT_THROW(run(OpKind::kGatherRows, {&x, &idx}, {&y}, {3, 2, 1}), InternalError);
  HT offs = index_tensor({2, 1});  // decreasing
  HT a(DType::kFloat32, {3, 2}), w(DType::kFloat32, {2, 2, 2}), o(DType::kFloat32, {3, 2});
  EXPECT_THROW(run(OpKind::kGroupedMM, {&a, &w, &offs}, {&o}, {3, 2, 2, 2, 2}), InternalError);
  HT c(DType::kFloat32, {2}), perm(DType::kInt64, {4}), po(DType::kInt64, {2});
  c.set(0, 3), c.set(1, 1);  // 4 routed rows where 2 were recorded
  EXPECT_THROW(run(OpKind::kPermuteIndices, {&c}, {&perm, &po}, {2, 2, 1}), InternalError);
}

// The operand dtypes are core's checks (core/runtime/moe_args.cc): the CPU kernels reach them
// through the same decode the CUDA plans call (tests/gpu/cuda_moe_plan_test.cc), one message.
TEST(KernelsMoe, CoreDecodeRefusesIntegerScoresAndMixedRowDtypes) {
  auto message = [](OpKind k, std::vector<HT*> in, std::vector<HT*> out,
                    std::vector<int64_t> iargs) {
    try {
      run(k, std::move(in), std::move(out), std::move(iargs));
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  HT scores(DType::kInt64, {3, 4}), probs(DType::kFloat32, {3, 4});
  const std::string soft = message(OpKind::kSoftmax, {&scores}, {&probs}, {3, 4, 0});
  EXPECT_NE(soft.find("input 0 must be fp32, bf16 or fp16, got int64"), std::string::npos) << soft;
  HT x(DType::kFloat32, {3, 2}), y(DType::kBFloat16, {2, 2});
  HT idx = index_tensor({0, 2});
  const std::string gather = message(OpKind::kGatherRows, {&x, &idx}, {&y}, {3, 2, 1});
  EXPECT_NE(gather.find("input and output dtypes differ"), std::string::npos) << gather;
  HT a(DType::kFloat32, {3, 2}), w(DType::kInt64, {2, 2, 2}), o(DType::kFloat32, {3, 2});
  HT offs = index_tensor({1, 3});
  const std::string mm = message(OpKind::kGroupedMM, {&a, &w, &offs}, {&o}, {3, 2, 2, 2, 3});
  EXPECT_NE(mm.find("input 1 must be fp32"), std::string::npos) << mm;
}
