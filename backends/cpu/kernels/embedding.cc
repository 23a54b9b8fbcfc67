// Token embedding (gather / scatter-add) and GPT-2's learned position embedding.
#include <numeric>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/layer_args.h"

namespace fullshard::cpu::detail {

namespace {
int64_t checked_id(const OpCall& op, int64_t id, int64_t vocab) {
  FULLSHARD_CHECK(id >= 0 && id < vocab, where(op) + "token id " + std::to_string(id) +
                                             " outside [0, " + std::to_string(vocab) + ")");
  return id;
}
}  // namespace

void embedding(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (ids, weight [V, D]) -> y [..., D]
  const EmbeddingArgs e = EmbeddingArgs::decode(op);  // core/runtime/layer_args.h
  const TensorMeta &w = in_meta(op, 1), &y = out_meta(op, 0);
  const int64_t V = e.vocab, D = e.dim, n = e.tokens;
  const int64_t* id = static_cast<const int64_t*>(in[0]);
  if (e.vocab_start >= 0) {
    // A vocab-parallel shard: rows [start, start + V); other ids give zero rows (_MaskPartial).
    const int64_t start = e.vocab_start;
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
  // (grad_y [..., D], ids) -> grad_weight [V, D]
  const EmbeddingArgs e = EmbeddingArgs::decode(op);  // core/runtime/layer_args.h
  const TensorMeta &g = in_meta(op, 0), &gw = out_meta(op, 0);
  const int64_t V = e.vocab, D = e.dim, n = e.tokens;
  const int64_t* given = static_cast<const int64_t*>(in[1]);
  // A vocab-parallel shard (vocab_start = its first row) gets the gradient of its rows only.
  const bool sharded = e.vocab_start >= 0;
  const int64_t start = sharded ? e.vocab_start : 0;
  std::vector<int64_t> order, local(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    local[t] = given[t] - start;
    if (!sharded) checked_id(op, given[t], V);
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
  // (x [B, S, D], wpe [P, D]) -> y = x + wpe[p0:p0+S]
  const PositionEmbeddingArgs pe = PositionEmbeddingArgs::decode(op);  // layer_args.h
  const TensorMeta &x = in_meta(op, 0), &w = in_meta(op, 1), &y = out_meta(op, 0);
  const int64_t D = pe.dim, S = pe.seq, rows = pe.rows, p0 = pe.first_position;
  std::vector<float> a(static_cast<size_t>(D)), p(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, a.data());
    load_f32(in[1], w.dtype, (p0 + r % S) * D, D, p.data());
    for (int64_t d = 0; d < D; ++d) a[d] += p[d];
    store_f32(a.data(), out[0], y.dtype, r * D, D);
  }
}

void position_embedding_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // grad_y [B, S, D] -> grad_wpe [P, D]; rows outside [p0, p0 + S) are zero
  const PositionEmbeddingArgs pe = PositionEmbeddingArgs::decode(op);  // layer_args.h
  const TensorMeta &g = in_meta(op, 0), &gw = out_meta(op, 0);
  const int64_t D = pe.dim, S = pe.seq, P = pe.positions, p0 = pe.first_position;
  const int64_t batch = S * D == 0 ? 0 : g.numel() / (S * D);
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
