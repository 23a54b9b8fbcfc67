// The kernels of the vocab-parallel cross-entropy (loss parallel, core/model/loss_parallel.cc):
// rows of D columns (RowArgs, VocabParallelArgs), fp32 math per element, sums in double.
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/op_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard::cpu::detail {

namespace {
template <class F>
void unary(const OpCall& op, const Ptrs& in, const Ptrs& out, F f) {
  decode_unary(op);  // core/runtime/op_args.h
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  std::vector<float> v(static_cast<size_t>(x.numel()));
  load_f32(in[0], x.dtype, 0, x.numel(), v.data());
  for (auto& e : v) e = f(e);
  store_f32(v.data(), out[0], y.dtype, 0, y.numel());
}
}  // namespace

void row_max(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowArgs ra = RowArgs::decode(op);  // core/runtime/eager_args.h
  const int64_t D = ra.dim, rows = ra.rows;
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  std::vector<float> row(static_cast<size_t>(D)), res(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, row.data());
    float m = -std::numeric_limits<float>::infinity();
    for (float v : row) m = std::max(m, v);
    res[r] = m;
  }
  store_f32(res.data(), out[0], y.dtype, 0, rows);
}

void sub_row(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowArgs ra = RowArgs::decode(op);
  const int64_t D = ra.dim, rows = ra.rows;
  const TensorMeta &a = in_meta(op, 0), &b = in_meta(op, 1), &y = out_meta(op, 0);
  std::vector<float> row(static_cast<size_t>(D)), sub(static_cast<size_t>(rows));
  load_f32(in[1], b.dtype, 0, rows, sub.data());
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], a.dtype, r * D, D, row.data());
    for (auto& v : row) v -= sub[r];
    store_f32(row.data(), out[0], y.dtype, r * D, D);
  }
}

void exp_kernel(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  unary(op, in, out, [](float v) { return std::exp(v); });
}

void log_kernel(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  unary(op, in, out, [](float v) { return std::log(v); });
}

void nll_vocab_parallel(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const VocabParallelArgs v = VocabParallelArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta &lp = in_meta(op, 0), &y = out_meta(op, 0);
  const int64_t D = v.dim, rows = v.rows, start = v.start;
  const auto* target = static_cast<const int64_t*>(in[1]);
  std::vector<float> res(static_cast<size_t>(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t col = target[r] - start;
    if (col < 0 || col >= D) continue;
    float v = 0;
    load_f32(in[0], lp.dtype, r * D + col, 1, &v);
    res[r] = -v;
  }
  store_f32(res.data(), out[0], y.dtype, 0, rows);
}

void nll_vocab_parallel_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const VocabParallelArgs v = VocabParallelArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta &g = in_meta(op, 0), &lp = in_meta(op, 1), &y = out_meta(op, 0);
  const int64_t D = v.dim, rows = v.rows, start = v.start;
  float gs = 0;
  load_f32(in[0], g.dtype, 0, 1, &gs);
  const float scale = gs * static_cast<float>(v.scale);
  const auto* target = static_cast<const int64_t*>(in[2]);
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[1], lp.dtype, r * D, D, row.data());
    const int64_t col = target[r] - start;
    for (int64_t d = 0; d < D; ++d) row[d] = scale * (std::exp(row[d]) - (d == col ? 1.0f : 0.0f));
    store_f32(row.data(), out[0], y.dtype, r * D, D);
  }
}

}  // namespace fullshard::cpu::detail
