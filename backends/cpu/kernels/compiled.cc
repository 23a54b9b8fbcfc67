// torch.compile's fused regions of a Llama block (NOTE [Compiled block] in
// core/model/compiled_block.cc): each kernel loads its inputs once, computes in fp32 (inductor
// upcasts bf16 loads) and rounds each output once; intermediates (h = x + a, silu(a)) are never
// stored. Row statistics accumulate in double, as the fused RMSNorm kernel does.
#include <cmath>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/norm_args.h"

namespace fullshard::cpu::detail {

namespace {

float sigmoid_f(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// y = norm(x (+ a)) * w, rstd per row. a may be null.
void norm_forward(const OpCall& op, const void* x, const void* a, const void* w, void* y,
                  float* rstd) {
  const NormArgs n = NormArgs::decode(op);  // core/runtime/norm_args.h
  const TensorMeta& xm = in_meta(op, 0);
  const TensorMeta& wm = in_meta(op, n.weight);
  const int64_t D = n.dim, rows = n.rows;
  const double eps = n.eps;
  F32In wf(w, wm.dtype, D);
  std::vector<float> row(static_cast<size_t>(D)), ar(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(x, xm.dtype, r * D, D, row.data());
    if (a) {
      load_f32(a, in_meta(op, 1).dtype, r * D, D, ar.data());
      for (int64_t d = 0; d < D; ++d) row[d] += ar[d];
    }
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(row[d]) * row[d];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
    rstd[r] = rs;
    for (int64_t d = 0; d < D; ++d) row[d] = row[d] * rs * wf[d];
    store_f32(row.data(), y, out_meta(op, 0).dtype, r * D, D);
  }
}

}  // namespace

void compiled_rms_norm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (x, w) -> (y, rstd)
  norm_forward(op, in[0], nullptr, in[1], out[0], static_cast<float*>(out[1]));
}

void compiled_add_rms_norm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (x, a, w) -> (y, rstd)
  norm_forward(op, in[0], in[1], in[2], out[0], static_cast<float*>(out[1]));
}

void compiled_rms_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (g_y, x, rstd, w [, a] [, g_h]) -> (g_x, g_w)
  const CompiledNormBackwardArgs b = CompiledNormBackwardArgs::decode(op);
  const TensorMeta &g = in_meta(op, 0), &x = in_meta(op, 1), &wm = in_meta(op, 3);
  const int64_t D = b.dim, rows = b.rows;
  const bool has_a = b.has_a, has_gh = b.has_g_h;
  const size_t ia = b.a, igh = b.g_h;
  F32In w(in[3], wm.dtype, D);
  const float* rstd = static_cast<const float*>(in[2]);
  std::vector<float> gr(static_cast<size_t>(D)), xr(static_cast<size_t>(D)),
      tmp(static_cast<size_t>(D));
  std::vector<double> gw(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], g.dtype, r * D, D, gr.data());
    load_f32(in[1], x.dtype, r * D, D, xr.data());
    if (has_a) {
      load_f32(in[ia], in_meta(op, ia).dtype, r * D, D, tmp.data());
      for (int64_t d = 0; d < D; ++d) xr[d] += tmp[d];  // h = x + a, recomputed
    }
    rms_norm_row_backward(gr.data(), xr.data(), w.data(), rstd[r], gw.data(), D);
    if (has_gh) {
      load_f32(in[igh], in_meta(op, igh).dtype, r * D, D, tmp.data());
      for (int64_t d = 0; d < D; ++d) gr[d] += tmp[d];
    }
    store_f32(gr.data(), out[0], out_meta(op, 0).dtype, r * D, D);
  }
  std::vector<float> f(gw.begin(), gw.end());
  store_f32(f.data(), out[1], out_meta(op, 1).dtype, 0, D);
}

// Each rotation is the eager kernel's (rope.cc: fp32 angles, one rounding), on one tensor.
void compiled_rope(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const CompiledRopeArgs r = CompiledRopeArgs::decode(op);  // core/runtime/rope_args.h
  const float sign = op.kind == OpKind::kCompiledRoPEBackward ? -1.0f : 1.0f;
  for (size_t i = 0; i < r.tensors; ++i)
    rope_rotate(r.tensor[i], in[i], in_meta(op, i).dtype, out[i], out_meta(op, i).dtype, sign,
                r.adjacent);
}

void compiled_silu_mul(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 2, 1);  // (a, b) -> silu(a) * b
  const int64_t n = out_meta(op, 0).numel();
  FULLSHARD_CHECK(in_meta(op, 0).numel() == n && in_meta(op, 1).numel() == n,
                  where(op) + "operand sizes differ");
  float a[kChunk], b[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(in[0], in_meta(op, 0).dtype, i, m, a);
    load_f32(in[1], in_meta(op, 1).dtype, i, m, b);
    for (int64_t j = 0; j < m; ++j) a[j] = a[j] * sigmoid_f(a[j]) * b[j];
    store_f32(a, out[0], out_meta(op, 0).dtype, i, m);
  }
}

void compiled_silu_mul_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 3, 2);  // (g, a, b) -> (g_a, g_b)
  const int64_t n = in_meta(op, 0).numel();
  for (size_t i = 1; i < 3; ++i)
    FULLSHARD_CHECK(in_meta(op, i).numel() == n, where(op) + "operand sizes differ");
  FULLSHARD_CHECK(out_meta(op, 0).numel() == n && out_meta(op, 1).numel() == n,
                  where(op) + "output sizes differ");
  float g[kChunk], a[kChunk], b[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(in[0], in_meta(op, 0).dtype, i, m, g);
    load_f32(in[1], in_meta(op, 1).dtype, i, m, a);
    load_f32(in[2], in_meta(op, 2).dtype, i, m, b);
    for (int64_t j = 0; j < m; ++j) {
      const float s = sigmoid_f(a[j]);
      const float ga = g[j] * b[j] * s * (1.0f + a[j] * (1.0f - s));
      b[j] = g[j] * a[j] * s;  // g_b = g * silu(a)
      a[j] = ga;
    }
    store_f32(a, out[0], out_meta(op, 0).dtype, i, m);
    store_f32(b, out[1], out_meta(op, 1).dtype, i, m);
  }
}

void compiled_residual_add(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  expect_arity(op, 3, 1);  // (x, a, f) -> x + a + f; out may alias any input
  const int64_t n = out_meta(op, 0).numel();
  for (size_t i = 0; i < 3; ++i)
    FULLSHARD_CHECK(in_meta(op, i).numel() == n, where(op) + "operand sizes differ");
  float x[kChunk], y[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(in[0], in_meta(op, 0).dtype, i, m, x);
    load_f32(in[1], in_meta(op, 1).dtype, i, m, y);
    for (int64_t j = 0; j < m; ++j) x[j] += y[j];
    load_f32(in[2], in_meta(op, 2).dtype, i, m, y);
    for (int64_t j = 0; j < m; ++j) x[j] += y[j];
    store_f32(x, out[0], out_meta(op, 0).dtype, i, m);
  }
}

}  // namespace fullshard::cpu::detail
