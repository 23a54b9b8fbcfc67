#include "core/scenario/moe_checks.h"

#include <string>

#include "core/common/error.h"

namespace fullshard {

void check_moe(const Scenario& s) {
  const ModelConfig& m = s.model;
  if (m.explicit_head_dim > 0)
    throw InputError("model.head_dim",
                     "is " + std::to_string(m.explicit_head_dim) + ", not dim / n_heads (" +
                         std::to_string(m.dim / m.n_heads) +
                         "), which the transformer does not build yet",
                     "parameter counts are exact (docs/models.md); to simulate, use a model whose "
                     "head_dim is dim / n_heads");
  if (m.qk_norm)
    throw InputError("model.qk_norm", "is true, which the transformer does not build yet",
                     "parameter counts are exact (docs/models.md); to simulate, use a model "
                     "without q/k norms");
  if (m.moe.enabled())
    throw InputError("model.moe",
                     "has " + std::to_string(m.moe.num_experts) +
                         " experts, but the transformer does not build the MoE layer yet",
                     "parameter counts are exact (docs/models.md); to simulate, use a dense model");
}

}  // namespace fullshard
