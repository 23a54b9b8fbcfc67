// torchao's float8 training on the CPU (docs/float8.md): the amax, scale and cast of an operand
// and torch._scaled_mm as torchao's emulation computes it.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/float8_args.h"
#include "core/tensor/float8.h"

// NOTE [Float8 on the CPU]: what the kinds of NOTE [Float8 casts] (core/model/float8_linear.cc)
// compute, bit for bit as torchao 0.18 on torch 2.11 (tools/oracle/float8_kernels.py):
// - amax: max |x| over the tensor, a row or a column, in the output's dtype (exact: one of the
//   inputs); NaN propagates as torch.max does.
// - scale (amax_to_scale): in float64 clamp(amax, 1e-12), reciprocal, * the format's max (torch's
//   `max / t` is t.reciprocal() * max), then .to(float32); round_scales_to_power_of_2 takes
//   exp2(floor(log2(s))) in fp32. The whole scale is written by the first eager kernel (step 1,
//   its output is fp32 and cannot hold the float64 intermediates); the later steps run in place
//   on the finished scale and leave it as it is.
// - cast: x.to(fp32) * scale (fp32), clamp(-max, max), .to(float8) rounding to nearest even
//   (core/tensor/float8.h); the compiled kernel (step 0) computes the scale from the amax and
//   the same cast in one pass.
// - torch._scaled_mm: torchao's emulation, torch.mm(a.float() / a_scale, b.float() / b_scale)
//   .to(out dtype): each operand dequantised by an fp32 division, one fp32 GEMM. The scale of an
//   operand is one value (tensorwise) or one per output row / column: the product's reduced dim
//   never carries a scale (NOTE [Float8 casts]'s axes).

namespace fullshard::cpu::detail {

namespace {

const Float8Format& format_of(DType d) {
  return d == DType::kFloat8E5M2 ? kFloat8E5M2 : kFloat8E4M3FN;
}

float fp8_max(DType d) { return d == DType::kFloat8E5M2 ? 57344.0f : 448.0f; }

// amax_to_scale of one amax value (NOTE [Float8 on the CPU]).
float amax_to_scale(float amax, DType target, bool pow2) {
  double a = static_cast<double>(amax);
  if (!std::isnan(a)) a = std::max(a, 1e-12);
  const double r = 1.0 / a;
  float s = static_cast<float>(r * static_cast<double>(fp8_max(target)));
  if (pow2) s = std::exp2(std::floor(std::log2(s)));
  return s;
}

// The scale element of [rows, cols] element (i, j) for a cast with these arguments.
inline int64_t scale_index(const Float8CastArgs& a, int64_t i, int64_t j) {
  if (a.granularity == 0) return 0;
  return a.axis == 0 ? j : i;
}

float clamp_nan(float v, float lo, float hi) {
  if (std::isnan(v)) return v;
  return std::min(std::max(v, lo), hi);
}

// x (any float dtype, [rows, cols]) * scale, saturated and cast to `target` codes.
void cast_scaled(const Float8CastArgs& a, const void* x, DType xd, const float* scale,
                 uint8_t* codes, DType target) {
  const Float8Format& f = format_of(target);
  const float mx = fp8_max(target);
  std::vector<float> row(static_cast<size_t>(a.cols));
  for (int64_t i = 0; i < a.rows; ++i) {
    load_f32(x, xd, i * a.cols, a.cols, row.data());
    for (int64_t j = 0; j < a.cols; ++j) {
      const float v = clamp_nan(row[j] * scale[scale_index(a, i, j)], -mx, mx);
      codes[i * a.cols + j] = float_to_float8(v, f, false);
    }
  }
}

}  // namespace

void float8_abs(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const Float8CastArgs a = Float8CastArgs::decode(op);
  const DType xd = in_meta(op, 0).dtype, yd = out_meta(op, 0).dtype;
  const int64_t n = a.rows * a.cols;
  std::vector<float> buf(static_cast<size_t>(std::min<int64_t>(n, kChunk)));
  for (int64_t o = 0; o < n; o += kChunk) {
    const int64_t c = std::min(kChunk, n - o);
    load_f32(in[0], xd, o, c, buf.data());
    for (int64_t i = 0; i < c; ++i) buf[i] = std::fabs(buf[i]);
    store_f32(buf.data(), out[0], yd, o, c);
  }
}

void float8_amax(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const Float8CastArgs a = Float8CastArgs::decode(op);
  const int64_t s = a.scale_numel();
  std::vector<float> amax(static_cast<size_t>(s), 0.0f), row(static_cast<size_t>(a.cols));
  for (int64_t i = 0; i < a.rows; ++i) {
    load_f32(in[0], in_meta(op, 0).dtype, i * a.cols, a.cols, row.data());
    for (int64_t j = 0; j < a.cols; ++j) {
      float& m = amax[scale_index(a, i, j)];
      const float v = std::fabs(row[j]);
      if (std::isnan(v) || v > m) m = std::isnan(m) ? m : v;
    }
  }
  store_f32(amax.data(), out[0], out_meta(op, 0).dtype, 0, s);
}

void float8_scale(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const Float8CastArgs a = Float8CastArgs::decode(op);
  if (a.step > 1) {  // the finished scale, in place (NOTE [Float8 on the CPU])
    FULLSHARD_CHECK(in[0] == out[0], where(op) + "expects its later steps in place");
    return;
  }
  const int64_t s = a.scale_numel();
  std::vector<float> amax(static_cast<size_t>(s));
  load_f32(in[0], in_meta(op, 0).dtype, 0, s, amax.data());
  float* scale = static_cast<float*>(out[0]);
  for (int64_t i = 0; i < s; ++i) scale[i] = amax_to_scale(amax[i], a.target_dtype(), a.pow2);
}

void float8_cast(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const Float8CastArgs a = Float8CastArgs::decode(op);
  const int64_t n = a.rows * a.cols, s = a.scale_numel();
  const DType xd = in_meta(op, 0).dtype, yd = out_meta(op, 0).dtype;
  switch (a.step) {
    case 0: {  // compiled: (x, amax fp32) -> (x8, scale)
      std::vector<float> amax(static_cast<size_t>(s));
      load_f32(in[1], in_meta(op, 1).dtype, 0, s, amax.data());
      float* scale = static_cast<float*>(out[1]);
      for (int64_t i = 0; i < s; ++i) scale[i] = amax_to_scale(amax[i], yd, a.pow2);
      cast_scaled(a, in[0], xd, scale, static_cast<uint8_t*>(out[0]), yd);
      return;
    }
    case 1: convert(in[0], xd, 0, out[0], yd, 0, n); return;  // x.to(float32)
    case 2: {                                                 // * scale (fp32)
      const float* x = static_cast<const float*>(in[0]);
      const float* scale = static_cast<const float*>(in[1]);
      float* y = static_cast<float*>(out[0]);
      for (int64_t i = 0; i < a.rows; ++i)
        for (int64_t j = 0; j < a.cols; ++j)
          y[i * a.cols + j] = x[i * a.cols + j] * scale[scale_index(a, i, j)];
      return;
    }
    case 3: {  // clamp(-max, max)
      const float mx = fp8_max(a.target_dtype());
      const float* x = static_cast<const float*>(in[0]);
      float* y = static_cast<float*>(out[0]);
      for (int64_t i = 0; i < n; ++i) y[i] = clamp_nan(x[i], -mx, mx);
      return;
    }
    case 4: {  // .to(float8)
      const Float8Format& f = format_of(yd);
      const float* x = static_cast<const float*>(in[0]);
      uint8_t* y = static_cast<uint8_t*>(out[0]);
      for (int64_t i = 0; i < n; ++i) y[i] = float_to_float8(x[i], f, false);
      return;
    }
    default: FULLSHARD_CHECK(false, where(op) + "has an unknown cast step");
  }
}

namespace {

// An operand's codes [rows, cols] divided by its scale: one value, one per row (per_row) or one
// per column.
std::vector<float> dequantise(const OpCall& op, size_t i, const void* codes, const void* scale,
                              int64_t rows, int64_t cols, bool per_row) {
  const Float8Format& f = format_of(in_meta(op, i).dtype);
  const int64_t sn = in_meta(op, i + 2).numel();  // 1 or along a dim (ScaledMmArgs::decode)
  const uint8_t* c = static_cast<const uint8_t*>(codes);
  const float* s = static_cast<const float*>(scale);
  float table[256];
  for (int k = 0; k < 256; ++k) table[k] = float8_to_float(static_cast<uint8_t>(k), f);
  std::vector<float> d(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k)
      d[r * cols + k] = table[c[r * cols + k]] / s[sn == 1 ? 0 : (per_row ? r : k)];
  return d;
}

}  // namespace

void scaled_mm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const ScaledMmArgs a = ScaledMmArgs::decode(op);
  const int64_t M = a.m, K = a.k, N = a.n;
  const TensorMeta& om = out_meta(op, 0);
  switch (op.kind) {
    case OpKind::kScaledMM: {  // x [M, K] (per row), w [N, K] (per row) -> y = x w^T [M, N]
      const auto x = dequantise(op, 0, in[0], in[2], M, K, true);
      const auto w = dequantise(op, 1, in[1], in[3], N, K, true);
      F32Out y(out[0], om.dtype, M * N);
      gemm(false, true, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, y.data(), N);
      y.commit();
      return;
    }
    case OpKind::kScaledMMBackwardInput: {  // g [M, N] (per row), w [N, K] (per column) -> g w
      const auto g = dequantise(op, 0, in[0], in[2], M, N, true);
      const auto w = dequantise(op, 1, in[1], in[3], N, K, false);
      F32Out gx(out[0], om.dtype, M * K);
      gemm(false, false, M, K, N, 1.0f, g.data(), N, w.data(), K, 0.0f, gx.data(), K);
      gx.commit();
      return;
    }
    case OpKind::kScaledMMBackwardWeight: {  // g [M, N], x [M, K] (per column) -> g^T x [N, K]
      const auto g = dequantise(op, 0, in[0], in[2], M, N, false);
      const auto x = dequantise(op, 1, in[1], in[3], M, K, false);
      F32Out gw(out[0], om.dtype, N * K);
      gemm(true, false, N, K, M, 1.0f, g.data(), N, x.data(), K, 0.0f, gw.data(), K);
      gw.commit();
      return;
    }
    default: FULLSHARD_CHECK(false, where(op) + "is not a scaled matmul");
  }
}

}  // namespace fullshard::cpu::detail
