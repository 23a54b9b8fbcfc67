// The mixture-of-experts router's kernels (core/model/moe_ops.cc, docs/moe.md): softmax /
// sigmoid over the experts and their backwards, top-k and its backward, route normalisation and
// its backward, the histogram of chosen experts, and the weighted combine (a batched [1, K] x
// [K, D] product) and its backward. PyTorch's semantics (torchtitan's TokenChoiceTopKRouter and
// MoE.forward): math in fp32, sums in double, results rounded once to the output dtype.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/moe_args.h"

namespace fullshard::cpu::detail {

void moe_softmax(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);  // core/runtime/moe_args.h
  const int64_t E = a.experts;
  std::vector<float> row(static_cast<size_t>(E));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * E, E, row.data());
    const float m = *std::max_element(row.begin(), row.end());
    double s = 0;
    for (float& v : row) s += (v = std::exp(v - m));
    const float inv = static_cast<float>(1.0 / s);
    for (float& v : row) v *= inv;
    store_f32(row.data(), out[0], out_meta(op, 0).dtype, n * E, E);
  }
}

void moe_softmax_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t E = a.experts;
  std::vector<float> g(static_cast<size_t>(E)), y(static_cast<size_t>(E));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * E, E, g.data());
    load_f32(in[1], in_meta(op, 1).dtype, n * E, E, y.data());
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(g[e]) * y[e];
    for (int64_t e = 0; e < E; ++e) g[e] = y[e] * (g[e] - static_cast<float>(dot));
    store_f32(g.data(), out[0], out_meta(op, 0).dtype, n * E, E);
  }
}

void moe_sigmoid(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t n = a.tokens * a.experts;
  float buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(in[0], in_meta(op, 0).dtype, i, m, buf);
    for (int64_t j = 0; j < m; ++j) buf[j] = 1.0f / (1.0f + std::exp(-buf[j]));
    store_f32(buf, out[0], out_meta(op, 0).dtype, i, m);
  }
}

void moe_sigmoid_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t n = a.tokens * a.experts;
  float g[kChunk], y[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(in[0], in_meta(op, 0).dtype, i, m, g);
    load_f32(in[1], in_meta(op, 1).dtype, i, m, y);
    for (int64_t j = 0; j < m; ++j) g[j] = g[j] * y[j] * (1.0f - y[j]);
    store_f32(g, out[0], out_meta(op, 0).dtype, i, m);
  }
}

// torch.topk(scores, k, dim=1) (sorted, largest first): equal scores keep the lower expert
// first, and NaN ranks above every number, as PyTorch orders them.
void moe_topk(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t E = a.experts, K = a.top_k;
  std::vector<float> row(static_cast<size_t>(E)), vals(static_cast<size_t>(K));
  std::vector<int64_t> order(static_cast<size_t>(E));
  int64_t* idx = static_cast<int64_t*>(out[1]);
  auto before = [&row](int64_t i, int64_t j) {
    const float a = row[i], b = row[j];
    if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
    return a > b;
  };
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * E, E, row.data());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), before);
    for (int64_t k = 0; k < K; ++k) {
      vals[k] = row[order[k]];
      idx[n * K + k] = order[k];
    }
    store_f32(vals.data(), out[0], out_meta(op, 0).dtype, n * K, K);
  }
}

// value_selecting_reduction_backward: zeros [N, E], then g scattered to the chosen experts.
void moe_topk_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t E = a.experts, K = a.top_k;
  const int64_t* idx = static_cast<const int64_t*>(in[1]);
  std::vector<float> g(static_cast<size_t>(K)), row(static_cast<size_t>(E));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * K, K, g.data());
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = idx[n * K + k];
      FULLSHARD_CHECK(e >= 0 && e < E, where(op) + "expert index out of range");
      row[e] = g[k];
    }
    store_f32(row.data(), out[0], out_meta(op, 0).dtype, n * E, E);
  }
}

// top_scores / (top_scores.sum(-1, keepdim=True) + 1e-20); the denominator is kept for the
// backward.
void moe_route_norm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t K = a.top_k;
  std::vector<float> s(static_cast<size_t>(K));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * K, K, s.data());
    double sum = 0;
    for (float v : s) sum += v;
    const float d = static_cast<float>(sum) + 1e-20f;
    for (float& v : s) v /= d;
    store_f32(s.data(), out[0], out_meta(op, 0).dtype, n * K, K);
    store_f32(&d, out[1], out_meta(op, 1).dtype, n, 1);
  }
}

// y_j = s_j / d with d = sum(s) + 1e-20: ds_i = g_i / d - sum_j g_j s_j / d^2.
void moe_route_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t K = a.top_k;
  std::vector<float> g(static_cast<size_t>(K)), s(static_cast<size_t>(K));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * K, K, g.data());
    load_f32(in[1], in_meta(op, 1).dtype, n * K, K, s.data());
    float d;
    load_f32(in[2], in_meta(op, 2).dtype, n, 1, &d);
    double gs = 0;
    for (int64_t k = 0; k < K; ++k) gs += static_cast<double>(g[k]) * s[k];
    const double dd = d;
    for (int64_t k = 0; k < K; ++k) g[k] = static_cast<float>(g[k] / dd - gs / (dd * dd));
    store_f32(g.data(), out[0], out_meta(op, 0).dtype, n * K, K);
  }
}

// torch.histc(indices.float(), bins=E, min=0, max=E): how many times each expert was chosen.
void moe_histogram(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t* idx = static_cast<const int64_t*>(in[0]);
  std::vector<float> counts(static_cast<size_t>(a.experts), 0.0f);
  for (int64_t i = 0; i < a.tokens * a.top_k; ++i)
    if (idx[i] >= 0 && idx[i] < a.experts) counts[idx[i]] += 1.0f;  // histc drops the rest
  store_f32(counts.data(), out[0], out_meta(op, 0).dtype, 0, a.experts);
}

// Token dropping (NOTE [Capacity factor] in core/model/moe_routing.h): each expert's slots
// ranked by score, higher first, then by token (policy 0), or by token (policy 1); the slots
// ranked past `capacity` point at expert E. Scores are compared as the fp32 values stored, so
// every backend keeps the same slots.
void moe_expert_capacity(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const CapacityArgs a = CapacityArgs::decode(op);  // core/runtime/moe_args.h
  const int64_t NK = a.tokens * a.top_k;
  const float* score = static_cast<const float*>(in[0]);
  const int64_t* idx = static_cast<const int64_t*>(in[1]);
  int64_t* y = static_cast<int64_t*>(out[0]);
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(a.experts));
  for (int64_t i = 0; i < NK; ++i) {
    y[i] = idx[i];
    if (idx[i] >= 0 && idx[i] < a.experts) slots[static_cast<size_t>(idx[i])].push_back(i);
  }
  for (std::vector<int64_t>& sl : slots) {
    if (static_cast<int64_t>(sl.size()) <= a.capacity) continue;
    if (a.policy == 0)  // slot i is token i / K: a stable sort keeps ties in token order
      std::stable_sort(sl.begin(), sl.end(),
                       [score](int64_t p, int64_t q) { return score[p] > score[q]; });
    for (size_t r = static_cast<size_t>(a.capacity); r < sl.size(); ++r) y[sl[r]] = a.experts;
  }
}

// torch.bmm(w [N, 1, K], y [N, K, D]) -> [N, D].
void moe_weighted_sum(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t K = a.top_k, D = in_meta(op, 1).numel() / std::max<int64_t>(1, a.tokens * K);
  std::vector<float> w(static_cast<size_t>(K)), y(static_cast<size_t>(K * D)),
      o(static_cast<size_t>(D));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * K, K, w.data());
    load_f32(in[1], in_meta(op, 1).dtype, n * K * D, K * D, y.data());
    for (int64_t d = 0; d < D; ++d) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(w[k]) * y[k * D + d];
      o[d] = static_cast<float>(s);
    }
    store_f32(o.data(), out[0], out_meta(op, 0).dtype, n * D, D);
  }
}

// (g [N, D], w [N, K], y [N, K, D]) -> (g_w[n, k] = <g[n], y[n, k]>, g_y[n, k] = w[n, k] g[n]).
void moe_weighted_sum_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RouterArgs a = RouterArgs::decode(op);
  const int64_t K = a.top_k, D = in_meta(op, 0).numel() / std::max<int64_t>(1, a.tokens);
  std::vector<float> g(static_cast<size_t>(D)), w(static_cast<size_t>(K)),
      y(static_cast<size_t>(K * D)), gw(static_cast<size_t>(K));
  for (int64_t n = 0; n < a.tokens; ++n) {
    load_f32(in[0], in_meta(op, 0).dtype, n * D, D, g.data());
    load_f32(in[1], in_meta(op, 1).dtype, n * K, K, w.data());
    load_f32(in[2], in_meta(op, 2).dtype, n * K * D, K * D, y.data());
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += static_cast<double>(g[d]) * y[k * D + d];
      gw[k] = static_cast<float>(s);
      for (int64_t d = 0; d < D; ++d) y[k * D + d] = w[k] * g[d];
    }
    store_f32(gw.data(), out[0], out_meta(op, 0).dtype, n * K, K);
    store_f32(y.data(), out[1], out_meta(op, 1).dtype, n * K * D, K * D);
  }
}

}  // namespace fullshard::cpu::detail
