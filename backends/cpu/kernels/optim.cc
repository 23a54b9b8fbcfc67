// Gradient clipping (clip_grad_norm_ split into squared norms, their sum and the scale) and
// torch.optim.AdamW's step (foreach / fused semantics).
#include <cmath>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/op_args.h"
#include "core/runtime/adamw_args.h"

namespace fullshard::cpu::detail {

namespace {
double sum_squares(const void* p, DType dt, int64_t n) {
  double acc = 0;
  float buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_f32(p, dt, i, m, buf);
    for (int64_t j = 0; j < m; ++j) acc += static_cast<double>(buf[j]) * buf[j];
  }
  return acc;
}
}  // namespace

void squared_norm(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (t_0, ..., t_{n-1}) -> out [n][, scratch]: out[i] = sum(t_i^2), accumulated in double. The
  // scratch (NOTE [foreach_norm scratch], core/optim/adamw.cc) is a GPU kernel's; ignored here.
  decode_reduce(op);  // core/runtime/op_args.h
  std::vector<float> r(op.inputs.size());
  for (size_t i = 0; i < op.inputs.size(); ++i)
    r[i] = static_cast<float>(sum_squares(in[i], in_meta(op, i).dtype, in_meta(op, i).numel()));
  store_f32(r.data(), out[0], out_meta(op, 0).dtype, 0, static_cast<int64_t>(r.size()));
}

void sum(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  decode_reduce(op);  // t -> out[0] = sum(t), accumulated in double
  const TensorMeta& m = in_meta(op, 0);
  double acc = 0;
  float buf[kChunk];
  for (int64_t i = 0; i < m.numel(); i += kChunk) {
    const int64_t c = std::min(kChunk, m.numel() - i);
    load_f32(in[0], m.dtype, i, c, buf);
    for (int64_t j = 0; j < c; ++j) acc += buf[j];
  }
  const float r = static_cast<float>(acc);
  store_f32(&r, out[0], out_meta(op, 0).dtype, 0, 1);
}

void clip_grad_scale(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  // (total_sq, g_1..g_n) -> g_i *= min(1, max_norm / (sqrt(total_sq) + 1e-6)), in place.
  const ClipGradArgs c = ClipGradArgs::decode(op);  // core/runtime/layer_args.h
  float total;
  load_f32(in[0], in_meta(op, 0).dtype, 0, 1, &total);
  // As clip_grad_norm_ in fp32: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.
  const float coef = std::min(1.0f, static_cast<float>(c.max_norm) / (std::sqrt(total) + 1e-6f));
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const TensorMeta &gi = in_meta(op, i + 1), &go = out_meta(op, i);
    FULLSHARD_CHECK(gi.numel() == go.numel(),
                    where(op) + "gradient " + std::to_string(i) + " sizes differ");
    float buf[kChunk];
    for (int64_t k = 0; k < gi.numel(); k += kChunk) {
      const int64_t m = std::min(kChunk, gi.numel() - k);
      load_f32(in[i + 1], gi.dtype, k, m, buf);
      for (int64_t j = 0; j < m; ++j) buf[j] *= coef;
      store_f32(buf, out[i], go.dtype, k, m);
    }
  }
}

void adamw(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const AdamWArgs a = AdamWArgs::decode(op);  // layout and host scalars: core/runtime/adamw_args.h
  const float decay = a.decay, w1 = a.one_minus_beta1, b2 = a.beta2, w2 = a.one_minus_beta2;
  const float neg_step_size = a.neg_step_size, bc2_sqrt = a.bias_correction2_sqrt, epsf = a.eps;
  const bool fused = a.fused;
  for (size_t k = 0; k < a.params; ++k) {
    const size_t i = 4 * k, o = a.outputs_per_param * k;
    const int64_t n = in_meta(op, i).numel();
    float p[kChunk], g[kChunk], m[kChunk], v[kChunk];
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t len = std::min(kChunk, n - c);
      load_f32(in[i], in_meta(op, i).dtype, c, len, p);
      load_f32(in[i + 1], in_meta(op, i + 1).dtype, c, len, g);
      load_f32(in[i + 2], in_meta(op, i + 2).dtype, c, len, m);
      load_f32(in[i + 3], in_meta(op, i + 3).dtype, c, len, v);
      for (int64_t j = 0; j < len; ++j) {
        p[j] *= decay;                        // decoupled weight decay
        m[j] += w1 * (g[j] - m[j]);           // exp_avg.lerp_(grad, 1 - beta1)
        v[j] = v[j] * b2 + w2 * g[j] * g[j];  // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2)
        g[j] = std::sqrt(v[j]) / bc2_sqrt + epsf;  // denom
        p[j] += neg_step_size * (m[j] / g[j]);     // addcdiv_(exp_avg, denom, -lr / bc1)
      }
      store_f32(p, out[o], out_meta(op, o).dtype, c, len);
      store_f32(m, out[o + 1], out_meta(op, o + 1).dtype, c, len);
      store_f32(v, out[o + 2], out_meta(op, o + 2).dtype, c, len);
      if (!fused) store_f32(g, out[o + 3], out_meta(op, o + 3).dtype, c, len);
    }
  }
}

}  // namespace fullshard::cpu::detail
