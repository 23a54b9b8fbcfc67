// RMSNorm (torch._fused_rms_norm) and LayerNorm (native_layer_norm), forward and backward.
// Row statistics and the weight/bias gradients accumulate in double; per-element math is fp32.
#include <cmath>
#include <optional>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/norm_args.h"

namespace fullshard::cpu::detail {

void rms_norm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const NormArgs n = NormArgs::decode(op);  // (x, w) -> (y, rstd)
  const TensorMeta &x = in_meta(op, 0), &wm = in_meta(op, 1), &y = out_meta(op, 0);
  const int64_t rows = n.rows, D = n.dim;
  const double eps = n.eps;
  F32In w(in[1], wm.dtype, D);
  float* rstd = static_cast<float*>(out[1]);
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, row.data());
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(row[d]) * row[d];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
    rstd[r] = rs;
    for (int64_t d = 0; d < D; ++d) row[d] = row[d] * rs * w[d];
    store_f32(row.data(), out[0], y.dtype, r * D, D);
  }
}

void rms_norm_row_backward(float* g, float* x, const float* w, float rstd, double* gw, int64_t D) {
  double dot = 0;  // sum_d (w g)_d * xhat_d
  for (int64_t d = 0; d < D; ++d) {
    const float xh = x[d] * rstd;
    gw[d] += static_cast<double>(g[d]) * xh;
    dot += static_cast<double>(w[d] * g[d]) * xh;
    x[d] = xh;
  }
  const float c = static_cast<float>(dot / static_cast<double>(D));
  for (int64_t d = 0; d < D; ++d) g[d] = rstd * (w[d] * g[d] - x[d] * c);
}

void rms_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (grad_y, x, rstd, w) -> (grad_x, grad_w); its parts (grad_y, x, rstd, w) -> grad_x and
  // (grad_y, x, rstd) -> grad_w compute the same rows and keep one of the two.
  const auto [rows, D, wi] = decode_norm_backward(op);  // core/runtime/norm_args.h
  const bool weight_only = op.kind == OpKind::kRMSNormBackwardWeight;
  const bool input_only = op.kind == OpKind::kRMSNormBackwardInput;
  const TensorMeta &g = in_meta(op, 0), &x = in_meta(op, 1);
  const std::vector<float> ones(weight_only ? static_cast<size_t>(D) : 0, 1.0f);
  std::optional<F32In> w;
  if (!weight_only) w.emplace(in[3], in_meta(op, wi).dtype, D);
  const float* wp = weight_only ? ones.data() : w->data();
  const float* rstd = static_cast<const float*>(in[2]);
  std::vector<float> gr(static_cast<size_t>(D)), xr(static_cast<size_t>(D));
  std::vector<double> gw(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], g.dtype, r * D, D, gr.data());
    load_f32(in[1], x.dtype, r * D, D, xr.data());
    rms_norm_row_backward(gr.data(), xr.data(), wp, rstd[r], gw.data(), D);
    if (!weight_only) store_f32(gr.data(), out[0], out_meta(op, 0).dtype, r * D, D);
  }
  if (input_only) return;
  const size_t gi = weight_only ? 0 : 1;
  std::vector<float> f(gw.begin(), gw.end());
  store_f32(f.data(), out[gi], out_meta(op, gi).dtype, 0, D);
}

void layer_norm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const NormArgs n = NormArgs::decode(op);  // (x, w, b) -> (y, mean, rstd)
  const TensorMeta &x = in_meta(op, 0), &wm = in_meta(op, 1), &bm = in_meta(op, 2),
                   &y = out_meta(op, 0);
  const int64_t rows = n.rows, D = n.dim;
  const double eps = n.eps;
  F32In w(in[1], wm.dtype, D), b(in[2], bm.dtype, D);
  float* mean = static_cast<float*>(out[1]);
  float* rstd = static_cast<float*>(out[2]);
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], x.dtype, r * D, D, row.data());
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += row[d];
    const double mu = s / static_cast<double>(D);
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += (row[d] - mu) * (row[d] - mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
    const float m = static_cast<float>(mu);
    mean[r] = m;
    rstd[r] = rs;
    for (int64_t d = 0; d < D; ++d) row[d] = (row[d] - m) * rs * w[d] + b[d];
    store_f32(row.data(), out[0], y.dtype, r * D, D);
  }
}

void layer_norm_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (grad_y, x, mean, rstd, w) -> (grad_x, grad_w, grad_b)
  const auto [rows, D, wi] = decode_norm_backward(op);  // core/runtime/norm_args.h
  const TensorMeta &g = in_meta(op, 0), &x = in_meta(op, 1), &wm = in_meta(op, wi);
  F32In w(in[4], wm.dtype, D);
  const float* mean = static_cast<const float*>(in[2]);
  const float* rstd = static_cast<const float*>(in[3]);
  std::vector<float> gr(static_cast<size_t>(D)), xr(static_cast<size_t>(D));
  std::vector<double> gw(static_cast<size_t>(D), 0.0), gb(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(in[0], g.dtype, r * D, D, gr.data());
    load_f32(in[1], x.dtype, r * D, D, xr.data());
    const float m = mean[r], rs = rstd[r];
    double sum_wg = 0, dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      const float xh = (xr[d] - m) * rs;
      const float wg = w[d] * gr[d];
      gw[d] += static_cast<double>(gr[d]) * xh;
      gb[d] += gr[d];
      sum_wg += wg;
      dot += static_cast<double>(wg) * xh;
      xr[d] = xh;
    }
    const float a = static_cast<float>(sum_wg / static_cast<double>(D));
    const float c = static_cast<float>(dot / static_cast<double>(D));
    for (int64_t d = 0; d < D; ++d) gr[d] = rs * (w[d] * gr[d] - a - xr[d] * c);
    store_f32(gr.data(), out[0], out_meta(op, 0).dtype, r * D, D);
  }
  std::vector<float> f(gw.begin(), gw.end());
  store_f32(f.data(), out[1], out_meta(op, 1).dtype, 0, D);
  f.assign(gb.begin(), gb.end());
  store_f32(f.data(), out[2], out_meta(op, 2).dtype, 0, D);
}

}  // namespace fullshard::cpu::detail
