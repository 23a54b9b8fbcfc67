#pragma once
// DeepSeek-V2 / V3's multi-head latent attention (MLA) sizes, as torchtitan's deepseek_v3
// `Attention.Config` holds them (torchtitan/models/deepseek_v3/model.py at
// pytorch/torchtitan@b5bcd76) and Hugging Face's DeepseekV3Config names them. kv_lora_rank 0: the
// model's attention is not MLA.
#include <cmath>
#include <cstdint>

namespace fullshard {

struct MlaConfig {
  int64_t q_lora_rank = 0;       // 0: q = wq(x); else q = wq_b(q_norm(wq_a(x)))
  int64_t kv_lora_rank = 0;      // the compressed kv latent's width (wkv_a's first columns)
  int64_t qk_nope_head_dim = 0;  // each head's q / k columns without RoPE
  int64_t qk_rope_head_dim = 0;  // each head's q / k columns with RoPE (k's shared over heads)
  int64_t v_head_dim = 0;        // each head's v columns
  // YaRN's softmax factor: torchtitan multiplies the scale by (0.1 mscale ln(rope_factor) + 1)^2
  // when its RoPE is "yarn" with rope_factor > 1 (HF: rope_scaling.factor and mscale_all_dim).
  // rope_factor 1: no YaRN, scale (qk_nope + qk_rope)^-0.5.
  double rope_factor = 1.0;
  double mscale = 1.0;

  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Attention.softmax_scale (NOTE [Multi-head latent attention] in mla_attention.cc).
  double softmax_scale() const {
    double s = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
    if (rope_factor > 1.0) {
      const double m = 0.1 * mscale * std::log(rope_factor) + 1.0;
      s *= m * m;
    }
    return s;
  }
};

}  // namespace fullshard
