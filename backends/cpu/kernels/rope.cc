// Rotary position embedding, Hugging Face Llama convention ("rotate_half"): within each head
// of width hd, element i (i < hd/2) pairs with element i + hd/2 and both rotate by
// angle = pos * theta^(-2i/hd):
//   y[i]        = x[i] cos - x[i + hd/2] sin
//   y[i + hd/2] = x[i + hd/2] cos + x[i] sin
// pos is the row's index along dim -2 of x ([B, S, H*hd]), or with context parallelism that
// index's position in the whole sequence (RopeArgs::position, NOTE [Context-parallel layout]).
// Frequencies, angles and cos/sin are fp32 as PyTorch computes them (NOTE [RoPE in fp32]); the
// rotation is fp32 and the result is rounded once. kRoPEComplex (torchtitan's view_as_complex(x) *
// freqs_cis) pairs ADJACENT elements instead:
//   y[2i] = x[2i] cos - x[2i+1] sin,  y[2i+1] = x[2i] sin + x[2i+1] cos
// (the complex product (a + ib)(cos + i sin)); its backward multiplies by the conjugate.
#include <cmath>

#include "backends/cpu/kernels/dtype_io.h"
#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/rope_args.h"

namespace fullshard::cpu::detail {

namespace {

// sign = +1: forward rotation; -1: its inverse (the backward: R(angle)^T = R(-angle)).
void rotate(const OpCall& op, const Ptrs& in, const Ptrs& out, float sign, bool adjacent) {
  const RopeArgs a = RopeArgs::decode(op);  // core/runtime/rope_args.h
  rope_rotate(a, in[0], in_meta(op, 0).dtype, out[0], out_meta(op, 0).dtype, sign, adjacent);
}

}  // namespace

void rope_rotate(const RopeArgs& args, const void* x, DType x_dtype, void* y, DType y_dtype,
                 float sign, bool adjacent) {
  const int64_t hd = args.head_dim, width = args.width, S = args.seq, half = hd / 2,
                rows = args.rows;
  // NOTE [RoPE in fp32], NOTE [Llama 3 RoPE scaling] (core/runtime/rope_args.h)
  const std::vector<float> inv = rope_inv_freq(args.rope, hd);
  std::vector<float> cs(static_cast<size_t>(S * half)), sn(static_cast<size_t>(S * half));
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = inv[static_cast<size_t>(i)];
    for (int64_t p = 0; p < S; ++p) {
      const float a = static_cast<float>(args.position(p)) * inv_freq;
      cs[p * half + i] = std::cos(a);
      sn[p * half + i] = sign * std::sin(a);
    }
  }
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(x, x_dtype, r * width, width, row.data());
    const float* c = cs.data() + (r % S) * half;
    const float* s = sn.data() + (r % S) * half;
    for (int64_t h = 0; h < width; h += hd) {
      float* x1 = row.data() + h;
      if (adjacent) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[2 * i], b = x1[2 * i + 1];
          x1[2 * i] = a * c[i] - b * s[i];
          x1[2 * i + 1] = b * c[i] + a * s[i];
        }
        continue;
      }
      float* x2 = x1 + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i], b = x2[i];
        x1[i] = a * c[i] - b * s[i];
        x2[i] = b * c[i] + a * s[i];
      }
    }
    store_f32(row.data(), y, y_dtype, r * width, width);
  }
}

void rope(const OpCall& op, const Ptrs& in, const Ptrs& out) { rotate(op, in, out, 1.0f, false); }

// HF LlamaRotaryEmbedding: freqs = pos * inv_freq [B, S, hd/2] (fp32), emb = cat(freqs, freqs),
// cos = emb.cos(), sin = emb.sin(): element i of a head uses frequency i % (hd/2).
void rotary_cos_sin(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RotaryCosSinArgs a = RotaryCosSinArgs::decode(op);
  const TensorMeta &c = out_meta(op, 0), &s = out_meta(op, 1);
  const int64_t hd = a.head_dim, rows = a.rows, half = hd / 2;
  std::vector<float> cr(static_cast<size_t>(hd)), sr(static_cast<size_t>(hd));
  const std::vector<float> inv = rope_inv_freq(a.rope, hd);  // NOTE [RoPE in fp32]
  for (int64_t r = 0; r < rows; ++r) {
    const auto pos = static_cast<float>(a.position(r));
    for (int64_t i = 0; i < hd; ++i) {
      const float a = pos * inv[static_cast<size_t>(i % half)];
      cr[i] = std::cos(a);
      sr[i] = std::sin(a);
    }
    store_f32(cr.data(), out[0], c.dtype, r * hd, hd);
    store_f32(sr.data(), out[1], s.dtype, r * hd, hd);
  }
}

void rotate_half_cat(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const RotateHalfCatArgs a = RotateHalfCatArgs::decode(op);
  const int64_t hd = a.head_dim, half = hd / 2;
  const TensorMeta &n = in_meta(op, 0), &x = in_meta(op, 1), &y = out_meta(op, 0);
  for (int64_t b = 0; b < a.blocks; ++b) {
    convert(in[0], n.dtype, b * half, out[0], y.dtype, b * hd, half);
    convert(in[1], x.dtype, b * hd, out[0], y.dtype, b * hd + half, half);
  }
}
void rope_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  rotate(op, in, out, -1.0f, false);
}
void rope_complex(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  rotate(op, in, out, 1.0f, true);
}
void rope_complex_backward(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  rotate(op, in, out, -1.0f, true);
}

}  // namespace fullshard::cpu::detail
