// The kernels of eager decompositions (model.implementation; docs/ops.md): pow / add / rsqrt by
// a scalar, a multiply broadcasting a per-row or per-column operand, the last-dim and
// leading-dims sums autograd's sum_to_size runs, mean's backward (expand / D), and repeat_kv
// (the copy expand + reshape makes, and the sum of its backward). Math is
// fp32 per element, sums accumulate in double; results are rounded once to the output dtype.
#include <cstring>
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/op_args.h"
#include "core/runtime/repeat_kv_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard::cpu::detail {

namespace {

template <class F>
void map1(const OpCall& op, const Ptrs& in, const Ptrs& out, F f) {
  const int64_t n = decode_unary(op);  // core/runtime/op_args.h
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  float buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(in[0], x.dtype, i, m, buf);
    for (int64_t j = 0; j < m; ++j) buf[j] = f(buf[j]);
    store_f32(buf, out[0], y.dtype, i, m);
  }
}

}  // namespace

void pow_scalar(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const float p = static_cast<float>(ScalarArgs::decode(op).value);
  if (p == 1.0f) return map1(op, in, out, [](float v) { return v; });
  if (p == 2.0f) return map1(op, in, out, [](float v) { return v * v; });
  if (p == 3.0f) return map1(op, in, out, [](float v) { return v * v * v; });
  map1(op, in, out, [p](float v) { return std::pow(v, p); });
}

void add_scalar(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const float c = static_cast<float>(ScalarArgs::decode(op).value);
  map1(op, in, out, [c](float v) { return v + c; });
}

void rsqrt(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  map1(op, in, out, [](float v) { return 1.0f / std::sqrt(v); });
}

void mul_broadcast(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const MulBroadcastArgs m = MulBroadcastArgs::decode(op);  // core/runtime/eager_args.h
  const TensorMeta &a = in_meta(op, 0), &bm = in_meta(op, 1), &y = out_meta(op, 0);
  const int64_t D = m.dim, rows = m.rows, hd = m.head_dim;
  const bool per_col = m.mode == MulBroadcastArgs::kPerColumn;
  const bool per_head = m.mode == MulBroadcastArgs::kPerHead;
  F32In b(in[1], bm.dtype, bm.numel());
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], a.dtype, r * D, D, row.data());
    if (per_head) {
      for (int64_t d = 0; d < D; ++d) row[d] *= b[r * hd + d % hd];
    } else if (per_col) {
      for (int64_t d = 0; d < D; ++d) row[d] *= b[d];
    } else {
      const float s = b[r];
      for (int64_t d = 0; d < D; ++d) row[d] *= s;
    }
    store_f32(row.data(), out[0], y.dtype, r * D, D);
  }
}

void sum_last_dim(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowArgs ra = RowArgs::decode(op);  // core/runtime/eager_args.h
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  const int64_t D = ra.dim, rows = ra.rows;
  const double scale = ra.scale;
  std::vector<float> row(static_cast<size_t>(D)), res(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, row.data());
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += row[d];
    res[r] = static_cast<float>(s * scale);
  }
  store_f32(res.data(), out[0], y.dtype, 0, rows);
}

void sum_leading_dims(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowArgs ra = RowArgs::decode(op);
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  const int64_t D = ra.dim, rows = ra.rows;
  std::vector<float> row(static_cast<size_t>(D));
  std::vector<double> acc(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, row.data());
    for (int64_t d = 0; d < D; ++d) acc[d] += row[d];
  }
  std::vector<float> res(acc.begin(), acc.end());
  store_f32(res.data(), out[0], y.dtype, 0, D);
}

void expand_last_dim(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RowArgs ra = RowArgs::decode(op);
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  const int64_t D = ra.dim, rows = ra.rows;
  const float scale = static_cast<float>(ra.scale);
  std::vector<float> v(static_cast<size_t>(rows)), row(static_cast<size_t>(D));
  load_f32(in[0], x.dtype, 0, rows, v.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < D; ++d) row[d] = v[r] * scale;
    store_f32(row.data(), out[0], y.dtype, r * D, D);
  }
}

}  // namespace fullshard::cpu::detail

namespace fullshard::cpu::detail {

void repeat_kv(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  const auto [rows, kv, rep, hd] = RepeatKvArgs::decode(op);  // core/runtime/repeat_kv_args.h
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < kv; ++h)
      for (int64_t j = 0; j < rep; ++j)
        convert(in[0], x.dtype, (r * kv + h) * hd, out[0], y.dtype, ((r * kv + h) * rep + j) * hd,
                hd);
}

void repeat_kv_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const TensorMeta &g = in_meta(op, 0), &y = out_meta(op, 0);
  const auto [rows, kv, rep, hd] = RepeatKvArgs::decode(op);
  std::vector<float> acc(static_cast<size_t>(hd)), part(static_cast<size_t>(hd));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < kv; ++h) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < rep; ++j) {
        load_f32(in[0], g.dtype, ((r * kv + h) * rep + j) * hd, hd, part.data());
        for (int64_t d = 0; d < hd; ++d) acc[d] += part[d];
      }
      store_f32(acc.data(), out[0], y.dtype, (r * kv + h) * hd, hd);
    }
}

}  // namespace fullshard::cpu::detail

namespace fullshard::cpu::detail {

void narrow_copy(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const NarrowCopyArgs c = NarrowCopyArgs::decode(op);  // core/runtime/tensor_parallel_args.h
  const int64_t n = c.n, iw = c.in_width, io = c.in_offset, ow = c.out_width, oo = c.out_offset;
  const TensorMeta &x = in_meta(op, 0), &y = out_meta(op, 0);
  const float scale = static_cast<float>(c.scale);
  std::vector<float> buf(static_cast<size_t>(n));
  for (int64_t b = 0; b < c.blocks; ++b) {
    load_f32(in[0], x.dtype, b * iw + io, n, buf.data());
    for (auto& v : buf) v *= scale;
    store_f32(buf.data(), out[0], y.dtype, b * ow + oo, n);
  }
}

// A layout copy: no arithmetic, so any dtype is copied bit for bit.
void transpose_blocks(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const auto [a, b, inner] = TransposeBlocksArgs::decode(op);  // tensor_parallel_args.h
  const TensorMeta& x = in_meta(op, 0);
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype);
  const auto* src = static_cast<const unsigned char*>(in[0]);
  auto* dst = static_cast<unsigned char*>(out[0]);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::memcpy(dst + (j * a + i) * row, src + (i * b + j) * row, row);
}

}  // namespace fullshard::cpu::detail
