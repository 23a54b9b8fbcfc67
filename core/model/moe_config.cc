#include "core/model/moe_config.h"

#include <algorithm>

namespace fullshard {

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (!enabled() || layer < first_dense_layers || interleave_step < 1) return false;
  if ((layer + 1) % interleave_step != 0) return false;
  return std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

// Closed form (n_layers may be any int64 a scenario gives before the limits refuse it): the
// layers i in [first_dense_layers, n_layers) with (i + 1) a multiple of interleave_step, less
// the distinct dense_layers among them.
int64_t MoeConfig::moe_layer_count(int64_t n_layers) const {
  if (!enabled() || interleave_step < 1 || n_layers <= first_dense_layers) return 0;
  const int64_t first = std::max<int64_t>(first_dense_layers, 0);
  int64_t n = n_layers / interleave_step - first / interleave_step;
  std::vector<int64_t> dense = dense_layers;
  std::sort(dense.begin(), dense.end());
  dense.erase(std::unique(dense.begin(), dense.end()), dense.end());
  for (int64_t d : dense)
    if (d >= first && d < n_layers && (d + 1) % interleave_step == 0) --n;
  return n;
}

}  // namespace fullshard
