#include "core/model/moe_config.h"

#include <algorithm>

namespace fullshard {

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (!enabled() || layer < first_dense_layers || interleave_step < 1) return false;
  if ((layer + 1) % interleave_step != 0) return false;
  return std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

int64_t MoeConfig::moe_layer_count(int64_t n_layers) const {
  int64_t n = 0;
  for (int64_t i = 0; i < n_layers; ++i) n += is_moe_layer(i) ? 1 : 0;
  return n;
}

}  // namespace fullshard
