#pragma once
// The rotary embedding's frequencies and how its ops carry them (fargs), in one place: the
// model encodes them (core/model/ops.cc, rotate_half_rope.cc) and every backend's kernel
// decodes them here.
//   fargs: {theta}                                    plain RoPE
//          {theta, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings}
//                                                     Llama 3.1's scaled RoPE (rope_type "llama3")
//          {theta, factor, beta_fast, beta_slow, original_max_position_embeddings, 1}
//                                                     YaRN (DeepSeek-V3, NOTE [YaRN RoPE])
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/common/error.h"
#include "core/runtime/op.h"

namespace fullshard {

// Hugging Face's rope_scaling {"rope_type": "llama3", ...} (config.json of Llama 3.1 / 3.2);
// factor 0: no scaling.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_max_position_embeddings = 8192;
  // YaRN (rope_scaling type "yarn"; torchtitan's rope scaling "yarn"): beta_fast / beta_slow
  // bound the interpolated pairs instead of the llama3 frequency factors.
  bool yarn = false;
  double beta_fast = 32;
  double beta_slow = 1;
  bool enabled() const { return factor > 0; }
};

struct RopeParams {
  double theta = 10000.0;
  RopeScaling scaling;
  // Context parallelism: the rows are cp rank cp_index's shard of each sequence, at the
  // positions cp_global_position gives (NOTE [Context-parallel layout] in
  // core/runtime/cp_layout.h); the ops carry it in iargs, not fargs.
  int64_t cp = 1, cp_index = 0;
  RopeParams(double t = 10000.0) : theta(t) {}  // NOLINT: a bare theta is plain RoPE
  RopeParams(double t, RopeScaling s) : theta(t), scaling(s) {}

  std::vector<double> fargs() const {
    if (!scaling.enabled()) return {theta};
    if (scaling.yarn)
      return {theta,
              scaling.factor,
              scaling.beta_fast,
              scaling.beta_slow,
              scaling.original_max_position_embeddings,
              1.0};
    return {theta, scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor,
            scaling.original_max_position_embeddings};
  }
  static RopeParams from_fargs(const std::vector<double>& f) {
    FULLSHARD_CHECK(f.size() == 1 || f.size() == 5 || f.size() == 6,
                    "rope: fargs must be {theta}, {theta, factor, low, high, original} or "
                    "{theta, factor, beta_fast, beta_slow, original, 1}");
    if (f.size() == 1) return RopeParams(f[0]);
    if (f.size() == 6) {
      FULLSHARD_CHECK(f[5] == 1, "rope: a YaRN fargs' sixth value (its marker) must be 1");
      RopeScaling y;
      y.factor = f[1], y.beta_fast = f[2], y.beta_slow = f[3];
      y.original_max_position_embeddings = f[4], y.yarn = true;
      return RopeParams(f[0], y);
    }
    return RopeParams(f[0], RopeScaling{f[1], f[2], f[3], f[4]});
  }
};

// NOTE [Llama 3 RoPE scaling]: the inverse frequency of pair i of a head of width hd is
// theta^(-2i/hd). Llama 3.1 stretches the long wavelengths (2 pi / inv_freq) for a longer
// context: a wavelength above original / low_freq_factor is divided by `factor`, one below
// original / high_freq_factor is kept, and in between the inverse frequency is interpolated
// with s = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor):
// (1 - s) inv_freq / factor + s inv_freq (transformers' _compute_llama3_parameters, Meta's
// apply_scaling).
//
// NOTE [RoPE in fp32]: PyTorch computes all of this in fp32 tensors: inv_freq = 1 /
// theta ** (arange(0, hd, 2).float() / hd), the scaling elementwise on it (Python scalars
// rounded to fp32), angle = pos.float() * inv_freq, then cos / sin of the fp32 angle
// (HF's LlamaRotaryEmbedding; torchtitan's precompute_freqs_cis likewise). The kernels do
// the same: in double, the angle at position 15 differed from PyTorch's by up to half an
// ulp (5e-7), which the oracle test saw as 3x larger gradient differences than GPT-2's.
//
// NOTE [YaRN RoPE]: torchtitan's deepseek_v3 precompute_freqs_cis with rope_factor != 1 (and HF's
// yarn rope init, the same rule): pair i of a head of width hd keeps its inverse frequency f_i
// below `low` and is divided by `factor` above `high`, linearly in between: f_i / factor *
// (1 - s_i) + f_i s_i, s_i = 1 - clamp((i - low) / (high - low), 0, 1), where low =
// floor(c(beta_fast)) and high = ceil(c(beta_slow)), c(b) = hd ln(original / (b 2 pi)) / (2 ln
// theta), clamped to [0, hd - 1] (high + 0.001 when equal). The mscale HF also puts on cos / sin is 1 when mscale ==
// mscale_all_dim (the import refuses other values); the softmax factor is MLA's (mla_config.h).
inline std::vector<float> rope_inv_freq(const RopeParams& p, int64_t head_dim) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  const RopeScaling& s = p.scaling;
  if (s.enabled() && s.yarn) {
    const double two_pi = 2 * 3.14159265358979323846, hd = static_cast<double>(head_dim);
    auto correction = [&](double rotations) {
      return hd * std::log(s.original_max_position_embeddings / (rotations * two_pi)) /
             (2 * std::log(p.theta));
    };
    const double low = std::max(std::floor(correction(s.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction(s.beta_slow)), hd - 1);
    if (low == high) high += 0.001;
    const float theta = static_cast<float>(p.theta), factor = static_cast<float>(s.factor);
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const float inv =
          1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
      const float ramp = std::clamp(
          (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
          1.0f);
      const float smooth = 1.0f - ramp;  // (1 - smooth), not ramp, below: fp32 rounds as
                                          // torchtitan's expression does
      f[static_cast<size_t>(i)] = inv / factor * (1.0f - smooth) + inv * smooth;
    }
    return f;
  }
  const float theta = static_cast<float>(p.theta),
              two_pi = static_cast<float>(2 * 3.14159265358979323846);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float inv = 1.0f / std::pow(theta, e);
    if (s.enabled()) {
      const auto orig = static_cast<float>(s.original_max_position_embeddings);
      const auto factor = static_cast<float>(s.factor), lo = static_cast<float>(s.low_freq_factor),
                 hi = static_cast<float>(s.high_freq_factor);
      const float low_wavelen =
          static_cast<float>(s.original_max_position_embeddings / s.low_freq_factor);
      const float high_wavelen =
          static_cast<float>(s.original_max_position_embeddings / s.high_freq_factor);
      const float wavelen = two_pi / inv;
      const float scaled = wavelen > low_wavelen ? inv / factor : inv;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (orig / wavelen - lo) / (hi - lo);
        inv = (1 - smooth) * scaled / factor + smooth * scaled;
      } else {
        inv = scaled;
      }
    }
    f[static_cast<size_t>(i)] = inv;
  }
  return f;
}

// ---- the RoPE ops' typed arguments (NOTE [One op table] in op_table.h)

// kRoPE, kRoPEBackward, kRoPEComplex, kRoPEComplexBackward: x [..., S, H*hd] -> out of x's size.
//   iargs {head_dim}; fargs RopeParams::fargs()
struct RopeArgs {
  int64_t head_dim = 0;
  RopeParams rope;
  int64_t rows = 0, seq = 0, width = 0;  // x as rows of `width`; row r is at position r % seq
  // Row r's position in its sequence: r % seq, or with context parallelism (rope.cp > 1,
  // iargs {head_dim, cp, cp_index}) cp_global_position(r % seq, seq, rope.cp, rope.cp_index).
  int64_t position(int64_t row) const;

  void encode(OpCall& op) const;
  static RopeArgs decode(const OpCall& op);
  // One rotated pair (x -> y) of `op` at head_dim hd: the checks decode runs on its operands.
  static RopeArgs decode_tensor(const OpCall& op, const TensorMeta& x, const TensorMeta& y,
                                int64_t hd);
};

// kCompiledRoPE (q, k) -> (q, k) and kCompiledRoPEBackward (g) -> (g_x): each tensor as RopeArgs.
//   iargs {head_dim, adjacent}; fargs RopeParams::fargs()
struct CompiledRopeArgs {
  int64_t head_dim = 0;
  bool adjacent = false;  // kRoPEComplex's pairs (2i, 2i+1), else rotate_half's
                          // (iargs {head_dim, adjacent[, cp, cp_index]})
  RopeParams rope;
  size_t tensors = 0;  // 2 forward, 1 backward
  RopeArgs tensor[2];  // each tensor's layout

  void encode(OpCall& op) const;
  static CompiledRopeArgs decode(const OpCall& op);
};

// kRotaryCosSin: () -> (cos, sin), both [B, S, head_dim].  iargs {head_dim}; fargs rope.
struct RotaryCosSinArgs {
  int64_t head_dim = 0;
  RopeParams rope;
  int64_t rows = 0, seq = 0;  // rows of head_dim; row r is at position(r) (as RopeArgs')
  int64_t position(int64_t row) const;

  void encode(OpCall& op) const;
  static RotaryCosSinArgs decode(const OpCall& op);
};

// kRotateHalfCat: (-x2 [.., hd/2], x [.., hd]) -> out [.., hd].  iargs {head_dim}.
struct RotateHalfCatArgs {
  int64_t head_dim = 0;
  int64_t blocks = 0;  // heads of head_dim elements in x

  void encode(OpCall& op) const;
  static RotateHalfCatArgs decode(const OpCall& op);
};

}  // namespace fullshard
