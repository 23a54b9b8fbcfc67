// Cross-entropy as PyTorch decomposes it: log_softmax over the last dim, then nll_loss
// with reduction='mean' and ignore_index (default -100).
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/layer_args.h"

namespace fullshard::cpu::detail {

namespace {

struct RowsV {
  int64_t rows, vocab;
};
RowsV rows_vocab(const OpCall& op, const TensorMeta& m) {
  const int64_t V = last_dim(m);
  FULLSHARD_CHECK(V > 0, where(op) + "empty class dim");
  return {m.numel() / V, V};
}
}  // namespace

void log_softmax(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 1, 1);  // x [..., V] -> log_softmax(x) [rows, V]
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  const auto [rows, V] = rows_vocab(op, x);
  FULLSHARD_CHECK(y.numel() == x.numel(), where(op) + "output size differs from x");
  std::vector<float> row(static_cast<size_t>(V));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * V, V, row.data());
    float mx = row[0];
    for (int64_t j = 1; j < V; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    const float lse = mx + static_cast<float>(std::log(sum));
    for (int64_t j = 0; j < V; ++j) row[j] -= lse;
    store_f32(row.data(), out[0], y.dtype, r * V, V);
  }
}

void log_softmax_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (grad_y, y = log_softmax output) -> grad_x = g - exp(y) * sum(g)
  const TensorMeta &g = in_meta(op, 0), &y = in_meta(op, 1), &gx = out_meta(op, 0);
  const auto [rows, V] = rows_vocab(op, y);
  FULLSHARD_CHECK(g.numel() == y.numel() && gx.numel() == y.numel(), where(op) + "sizes differ");
  std::vector<float> gr(static_cast<size_t>(V)), yr(static_cast<size_t>(V));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], g.dtype, r * V, V, gr.data());
    load_f32(in[1], y.dtype, r * V, V, yr.data());
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += gr[j];
    const float sf = static_cast<float>(s);
    for (int64_t j = 0; j < V; ++j) gr[j] -= std::exp(yr[j]) * sf;
    store_f32(gr.data(), out[0], gx.dtype, r * V, V);
  }
}

void nll_loss(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (log_probs [rows, V], labels [rows] int64) -> (loss, total_weight) scalars
  const NllLossArgs a = NllLossArgs::decode(op);  // core/runtime/layer_args.h
  const TensorMeta& lp = in_meta(op, 0);
  const int64_t rows = a.rows, V = a.vocab, ignore = a.ignore_index;
  // loss and total_weight have the log-probs' dtype, as aten's nll_loss gives them.
  FULLSHARD_CHECK(out_meta(op, 0).numel() == 1 && out_meta(op, 1).numel() == 1 &&
                      is_float_dtype(out_meta(op, 0).dtype) &&
                      is_float_dtype(out_meta(op, 1).dtype),
                  where(op) + "loss and total_weight must be float scalars");
  const int64_t* y = static_cast<const int64_t*>(in[1]);
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (y[r] == ignore) continue;
    FULLSHARD_CHECK(y[r] >= 0 && y[r] < V,
                    where(op) + "label " + std::to_string(y[r]) + " out of range");
    float v;
    load_f32(in[0], lp.dtype, r * V + y[r], 1, &v);
    sum += v;
    ++count;
  }
  // Mean over non-ignored rows; 0 / 0 = NaN when every label is ignored, as in PyTorch.
  const float loss = count ? static_cast<float>(-sum / static_cast<double>(count))
                           : std::numeric_limits<float>::quiet_NaN();
  const float total = static_cast<float>(count);
  store_f32(&loss, out[0], out_meta(op, 0).dtype, 0, 1);
  store_f32(&total, out[1], out_meta(op, 1).dtype, 0, 1);
}

void nll_loss_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (grad_loss scalar, labels, total_weight) -> grad_log_probs [rows, V]
  const NllLossArgs a = NllLossArgs::decode(op);  // core/runtime/layer_args.h
  const TensorMeta &gl = in_meta(op, 0), &gx = out_meta(op, 0);
  const int64_t rows = a.rows, V = a.vocab, ignore = a.ignore_index;
  FULLSHARD_CHECK(
      gl.numel() == 1 && in_meta(op, 2).numel() == 1 && is_float_dtype(in_meta(op, 2).dtype),
      where(op) + "grad_loss and total_weight must be float scalars");
  float g, tw;
  load_f32(in[0], gl.dtype, 0, 1, &g);
  load_f32(in[2], in_meta(op, 2).dtype, 0, 1, &tw);
  const float v = -g / tw;
  const int64_t* y = static_cast<const int64_t*>(in[1]);
  std::vector<float> row(static_cast<size_t>(V), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const bool hit = y[r] != ignore;
    if (hit) {
      FULLSHARD_CHECK(y[r] >= 0 && y[r] < V,
                      where(op) + "label " + std::to_string(y[r]) + " out of range");
      row[y[r]] = v;
    }
    store_f32(row.data(), out[0], gx.dtype, r * V, V);
    if (hit) row[y[r]] = 0.0f;
  }
}

}  // namespace fullshard::cpu::detail
