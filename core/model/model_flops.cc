#include "core/model/model_flops.h"

namespace fullshard {

double model_flops_per_token(const ModelConfig& m, int64_t seq_len) {
  const double embed = static_cast<double>(m.vocab_size) * static_cast<double>(m.dim);
  return 6.0 * (static_cast<double>(parameter_count(m)) - embed) +
         12.0 * static_cast<double>(m.n_layers) * static_cast<double>(m.n_heads) *
             static_cast<double>(m.head_dim()) * static_cast<double>(seq_len);
}

}  // namespace fullshard
