#include "core/model/model_flops.h"

namespace fullshard {

int64_t active_parameter_count(const ModelConfig& m) {
  const int64_t total = parameter_count(m);
  if (!m.moe.enabled()) return total;
  const MoeConfig& e = m.moe;
  const int64_t experts = e.moe_layer_count(m.n_layers) * e.num_experts * 3 * m.dim * e.expert_dim;
  return total - experts + experts * e.top_k / e.num_experts;  // torchtitan's integer division
}

double model_flops_per_token(const ModelConfig& m, int64_t seq_len) {
  const double embed = static_cast<double>(m.vocab_size) * static_cast<double>(m.dim);
  // torchtitan's head_dims: q / k's plus v's head size (get_moe_model_nparams_and_flops in
  // torchtitan/models/utils.py at pytorch/torchtitan@b5bcd76; MLA: nope + rope + v).
  const double head_dims = m.mla.enabled()
                               ? static_cast<double>(m.mla.qk_head_dim() + m.mla.v_head_dim)
                               : 2.0 * static_cast<double>(m.head_dim());
  return 6.0 * (static_cast<double>(active_parameter_count(m)) - embed) +
         6.0 * static_cast<double>(m.n_layers) * static_cast<double>(m.n_heads) * head_dims *
             static_cast<double>(seq_len);
}

}  // namespace fullshard
