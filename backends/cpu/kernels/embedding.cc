// Token embedding (gather / scatter-add) and GPT-2's learned position embedding.
#include <numeric>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"

namespace fullshard::cpu::detail {

namespace {
void check_ids(const OpCall& op, const TensorMeta& ids, const TensorMeta& weight) {
  FULLSHARD_CHECK(ids.dtype == DType::kInt64, where(op) + "token ids must be int64");
  FULLSHARD_CHECK(weight.shape.size() == 2, where(op) + "the embedding weight must be [V, D]");
}
int64_t checked_id(const OpCall& op, int64_t id, int64_t vocab) {
  FULLSHARD_CHECK(id >= 0 && id < vocab, where(op) + "token id " + std::to_string(id) +
                                             " outside [0, " + std::to_string(vocab) + ")");
  return id;
}
}  // namespace

void embedding(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (ids, weight [V, D]) -> y [..., D]
  const TensorMeta &ids = in_meta(op, 0), &w = in_meta(op, 1), &y = out_meta(op, 0);
  check_ids(op, ids, w);
  const int64_t V = w.shape[0], D = w.shape[1], n = ids.numel();
  FULLSHARD_CHECK(y.numel() == n * D, where(op) + "output is not [ids..., D]");
  const int64_t* id = static_cast<const int64_t*>(in[0]);
  if (!op.iargs.empty()) {
    // A vocab-parallel shard: rows [start, start + V); other ids give zero rows (_MaskPartial).
    const int64_t start = op.iargs[0];
    std::vector<float> zero(static_cast<size_t>(D), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t local = id[t] - start;
      if (local >= 0 && local < V)
        convert(in[1], w.dtype, local * D, out[0], y.dtype, t * D, D);
      else
        store_f32(zero.data(), out[0], y.dtype, t * D, D);
    }
    return;
  }
  for (int64_t t = 0; t < n; ++t)
    convert(in[1], w.dtype, checked_id(op, id[t], V) * D, out[0], y.dtype, t * D, D);
}

void embedding_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (grad_y [..., D], ids) -> grad_weight [V, D]
  const TensorMeta &g = in_meta(op, 0), &ids = in_meta(op, 1), &gw = out_meta(op, 0);
  check_ids(op, ids, gw);
  const int64_t V = gw.shape[0], D = gw.shape[1], n = ids.numel();
  FULLSHARD_CHECK(g.numel() == n * D, where(op) + "grad_y is not [ids..., D]");
  const int64_t* given = static_cast<const int64_t*>(in[1]);
  // A vocab-parallel shard (iargs[0] = its first row) gets the gradient of its rows only.
  const int64_t start = op.iargs.empty() ? 0 : op.iargs[0];
  std::vector<int64_t> order, local(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    local[t] = given[t] - start;
    if (op.iargs.empty()) checked_id(op, given[t], V);
    if (local[t] >= 0 && local[t] < V) order.push_back(t);
  }
  const int64_t* id = local.data();
  // Group token positions by id (stable: each row sums its tokens in position order).
  std::stable_sort(order.begin(), order.end(),
                   [id](int64_t a, int64_t b) { return id[a] < id[b]; });
  std::vector<float> acc(static_cast<size_t>(D)), row(static_cast<size_t>(D)),
      zero(static_cast<size_t>(D), 0.0f);
  int64_t next_row = 0;  // rows below it are written
  for (size_t i = 0; i < order.size();) {
    const int64_t v = id[order[i]];
    for (; next_row < v; ++next_row) store_f32(zero.data(), out[0], gw.dtype, next_row * D, D);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (; i < order.size() && id[order[i]] == v; ++i) {
      load_f32(in[0], g.dtype, order[i] * D, D, row.data());
      for (int64_t d = 0; d < D; ++d) acc[d] += row[d];
    }
    store_f32(acc.data(), out[0], gw.dtype, v * D, D);
    next_row = v + 1;
  }
  for (; next_row < V; ++next_row) store_f32(zero.data(), out[0], gw.dtype, next_row * D, D);
}

void position_embedding(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (x [B, S, D], wpe [P, D]) -> y = x + wpe[0:S]
  const TensorMeta &x = in_meta(op, 0), &w = in_meta(op, 1), &y = out_meta(op, 0);
  FULLSHARD_CHECK(x.shape.size() >= 2 && w.shape.size() == 2 && w.shape[1] == x.shape.back(),
                  where(op) + "expects x [..., S, D] and wpe [P, D]");
  const int64_t D = x.shape.back(), S = x.shape[x.shape.size() - 2], rows = x.numel() / D;
  const int64_t p0 = op.iargs.empty() ? 0 : op.iargs[0];
  FULLSHARD_CHECK(p0 >= 0 && p0 + S <= w.shape[0],
                  where(op) + "sequence longer than the position table");
  FULLSHARD_CHECK(y.numel() == x.numel(), where(op) + "output size differs from x");
  std::vector<float> a(static_cast<size_t>(D)), p(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, a.data());
    load_f32(in[1], w.dtype, (p0 + r % S) * D, D, p.data());
    for (int64_t d = 0; d < D; ++d) a[d] += p[d];
    store_f32(a.data(), out[0], y.dtype, r * D, D);
  }
}

void position_embedding_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 1, 1);  // grad_y [B, S, D] -> grad_wpe [P, D] (rows >= S are zero)
  const TensorMeta &g = in_meta(op, 0), &gw = out_meta(op, 0);
  FULLSHARD_CHECK(g.shape.size() >= 2 && gw.shape.size() == 2 && gw.shape[1] == g.shape.back(),
                  where(op) + "expects grad [..., S, D] and grad_wpe [P, D]");
  const int64_t D = g.shape.back(), S = g.shape[g.shape.size() - 2], P = gw.shape[0];
  const int64_t batch = g.numel() / (S * D);
  const int64_t p0 = op.iargs.empty() ? 0 : op.iargs[0];  // rows outside [p0, p0 + S) are zero
  FULLSHARD_CHECK(p0 >= 0 && p0 + S <= P, where(op) + "sequence longer than the position table");
  std::vector<double> acc(static_cast<size_t>(S * D), 0.0);
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < S; ++s) {
      load_f32(in[0], g.dtype, (b * S + s) * D, D, row.data());
      double* a = acc.data() + s * D;
      for (int64_t d = 0; d < D; ++d) a[d] += row[d];
    }
  std::vector<float> f(static_cast<size_t>(D));
  for (int64_t s = 0; s < P; ++s) {
    for (int64_t d = 0; d < D; ++d)
      f[d] = s >= p0 && s < p0 + S ? static_cast<float>(acc[(s - p0) * D + d]) : 0.0f;
    store_f32(f.data(), out[0], gw.dtype, s * D, D);
  }
}

}  // namespace fullshard::cpu::detail
