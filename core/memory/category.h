#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace fullshard {

// What a block of memory holds. Names follow PyTorch's FSDPMemTracker (_FSDPRefType) so a
// breakdown reads the same as one from torch.distributed._tools.fsdp2_mem_tracker.
enum class MemCategory : uint8_t {
  kShardedParam,    // padded sharded parameter storage (FSDPParam._sharded_param_data)
  kUnshardedParam,  // per-parameter all-gather outputs (unsharded storage) + post-forward shards,
                    // and parameters FSDP ignores (whole on every rank: ignored_param.h)
  kShardedGrad,     // reduce-scatter outputs kept as sharded .grad
  kUnshardedGrad,   // .grad of unsharded params during backward / accumulation
  kOptimizerState,  // AdamW exp_avg / exp_avg_sq
  kActivation,      // forward outputs alive for backward, inputs, recomputed activations
  kAllGather,       // the flat all-gather output buffer of a group (and its copy-in)
  kReduceScatter,   // the flat reduce-scatter input buffer of a group
  kTemporary,       // activation grads, casts, scratch
  kWorkspace,       // library workspaces kept for the run (cuBLAS: NOTE [cuBLAS workspaces])
};
constexpr int kNumMemCategories = 10;

constexpr std::array<MemCategory, kNumMemCategories> kAllMemCategories = {
    MemCategory::kShardedParam,  MemCategory::kUnshardedParam, MemCategory::kShardedGrad,
    MemCategory::kUnshardedGrad, MemCategory::kOptimizerState, MemCategory::kActivation,
    MemCategory::kAllGather,     MemCategory::kReduceScatter,  MemCategory::kTemporary,
    MemCategory::kWorkspace};

// snake_case keys used in reports: "sharded_params", "unsharded_params", "sharded_grads",
// "unsharded_grads", "optimizer_state", "activations", "all_gather_buffers",
// "reduce_scatter_buffers", "temporaries", "workspaces".
std::string_view category_key(MemCategory c);

using CategoryBytes = std::array<uint64_t, kNumMemCategories>;

}  // namespace fullshard
