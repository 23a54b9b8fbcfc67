#include "core/memory/category.h"

namespace fullshard {

std::string_view category_key(MemCategory c) {
  switch (c) {
    case MemCategory::kShardedParam: return "sharded_params";
    case MemCategory::kUnshardedParam: return "unsharded_params";
    case MemCategory::kShardedGrad: return "sharded_grads";
    case MemCategory::kUnshardedGrad: return "unsharded_grads";
    case MemCategory::kOptimizerState: return "optimizer_state";
    case MemCategory::kActivation: return "activations";
    case MemCategory::kAllGather: return "all_gather_buffers";
    case MemCategory::kReduceScatter: return "reduce_scatter_buffers";
    case MemCategory::kTemporary: return "temporaries";
    case MemCategory::kWorkspace: return "workspaces";
  }
  return "?";
}

}  // namespace fullshard
