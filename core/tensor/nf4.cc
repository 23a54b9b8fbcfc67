#include "core/tensor/nf4.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "core/tensor/float_convert.h"

// NOTE [NF4]: torchao's NF4Tensor (torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py at
// pytorch/ao@36027d8, formerly torchao/dtypes/nf4tensor.py) on a bf16 weight, every bf16 op
// computed in fp32 and rounded to bf16 (nearest even) as ATen's CPU kernels do:
//   absmax[b]  = max |x| over block b (block_size elements)          (get_block_absmax)
//   mean       = bf16(fp32 sum(absmax) / n_blocks)                   (scalers_1.mean())
//   c[b]       = absmax[b] - mean;  a[k] = max |c| over scaler block k
//   factor[k]  = reciprocal(2 * a[k]) * 256                          (256 / (2 * a): __rtruediv__)
//   scalers[b] = int8(clamp(round(c[b] * factor[k]), -128, 127))     (round half to even)
//   code       = argmin_i |x / absmax[b] - nf4[i]| (first i on ties)  (quantize_tensor_nearest)
//   data[j]    = code[2j] << 4 | code[2j + 1]
// Quantisation divides by the exact absmax; dequantisation uses the double-quantised one:
//   s[b] = bf16(q[b] / factor[k]) + mean;  x'= nf4[code] * s[b]       (get_original_weight)
// The fp32 sum is summed here in double then rounded (torch sums in fp32 in its cascade order:
// the two differ only when the fp32 sum itself is inexact; the bf16 mean absorbs almost all).
// A block of zeros divides 0 by 0: NaN, whose code torch's min(dim) gives as index 0.

namespace fullshard {
namespace {

float bf(uint16_t h) { return bf16_to_float(h); }
uint16_t rb(float f) { return float_to_bf16(f); }

}  // namespace

const std::array<uint16_t, 16>& nf4_table_bf16() {
  static const std::array<uint16_t, 16> table = [] {
    constexpr double kLevels[16] = {-1.0000, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848,
                                    -0.0911, 0.0000,  0.0796,  0.1609,  0.2461,  0.3379,
                                    0.4407,  0.5626,  0.7230,  1.0000};
    std::array<uint16_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = rb(static_cast<float>(kLevels[i]));
    return t;
  }();
  return table;
}

Nf4Quantized nf4_quantize(const uint16_t* x, const Nf4Layout& l) {
  FULLSHARD_CHECK(l.valid(), "nf4_quantize: " + std::to_string(l.numel) +
                                 " elements do not split into blocks of " +
                                 std::to_string(l.block_size) + " x " +
                                 std::to_string(l.scaler_block_size));
  const int64_t nb = l.n_blocks(), ns = l.n_scaler_blocks(), bs = l.block_size;
  std::vector<float> absmax(static_cast<size_t>(nb));
  double sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    float m = 0;
    for (int64_t i = 0; i < bs; ++i) m = std::max(m, std::fabs(bf(x[b * bs + i])));
    absmax[static_cast<size_t>(b)] = m;
    sum += m;
  }
  Nf4Quantized q;
  q.scaler_mean = rb(static_cast<float>(sum) / static_cast<float>(nb));
  const float mean = bf(q.scaler_mean);
  std::vector<float> centered(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b)
    centered[static_cast<size_t>(b)] = bf(rb(absmax[static_cast<size_t>(b)] - mean));
  q.factors.resize(static_cast<size_t>(ns));
  q.scalers.resize(static_cast<size_t>(nb));
  for (int64_t k = 0; k < ns; ++k) {
    float a = 0;
    for (int64_t i = 0; i < l.scaler_block_size; ++i)
      a = std::max(a, std::fabs(centered[static_cast<size_t>(k * l.scaler_block_size + i)]));
    const float twice = bf(rb(2.0f * a));
    const uint16_t f = rb(bf(rb(1.0f / twice)) * 256.0f);
    q.factors[static_cast<size_t>(k)] = f;
    for (int64_t i = 0; i < l.scaler_block_size; ++i) {
      const size_t b = static_cast<size_t>(k * l.scaler_block_size + i);
      float v = std::nearbyint(bf(rb(centered[b] * bf(f))));  // ties to even
      if (std::isnan(v)) v = 0;  // a scaler block all at the mean: 0 * inf (not torch's)
      q.scalers[b] = static_cast<int8_t>(std::clamp(v, -128.0f, 127.0f));
    }
  }
  const auto& table = nf4_table_bf16();
  q.data.assign(static_cast<size_t>(l.numel / 2), 0);
  for (int64_t e = 0; e < l.numel; ++e) {
    const float s = bf(rb(bf(x[e]) / absmax[static_cast<size_t>(e / bs)]));
    int best = 0;
    if (!std::isnan(s)) {
      float best_diff = INFINITY;
      for (int i = 0; i < 16; ++i) {
        const float d = std::fabs(bf(rb(s - bf(table[static_cast<size_t>(i)]))));
        if (d < best_diff) {
          best_diff = d;
          best = i;
        }
      }
    }
    q.data[static_cast<size_t>(e / 2)] |= static_cast<uint8_t>(e % 2 == 0 ? best << 4 : best);
  }
  return q;
}

void nf4_dequantize(const uint8_t* data, const int8_t* scalers, const uint16_t* factors,
                    uint16_t scaler_mean, const uint16_t* table, const Nf4Layout& l,
                    uint16_t* out) {
  FULLSHARD_CHECK(l.valid(), "nf4_dequantize: a bad layout");
  const float mean = bf(scaler_mean);
  const int64_t bs = l.block_size;
  for (int64_t b = 0; b < l.n_blocks(); ++b) {
    const float f = bf(factors[b / l.scaler_block_size]);
    const float s = bf(rb(bf(rb(static_cast<float>(scalers[b]) / f)) + mean));
    for (int64_t i = 0; i < bs; ++i) {
      const int64_t e = b * bs + i;
      const uint8_t byte = data[e / 2];
      const int code = e % 2 == 0 ? byte >> 4 : byte & 0xF;
      out[e] = rb(bf(table[code]) * s);
    }
  }
}

}  // namespace fullshard
