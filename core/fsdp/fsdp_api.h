#pragma once
// The options of fully_shard, as torch.distributed.fsdp's _fsdp_api.py defines them.
#include <optional>

#include "core/tensor/dtype.h"

namespace fullshard {

// FSDP2's reshard_after_forward: True, False, an int N, or unset (None: root False,
// non-root True, as newer PyTorch resolves it).
struct ReshardAfterForward {
  enum class Kind : uint8_t { kDefault, kTrue, kFalse, kInt } kind = Kind::kDefault;
  int n = 0;  // kInt only
};

struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype;   // unset: the original (fp32) dtype
  std::optional<DType> reduce_dtype;  // unset: the gradient (param) dtype
  std::optional<DType> output_dtype;  // unset: no cast of module outputs
  bool cast_forward_inputs = true;
};

struct FullyShardOptions {
  ReshardAfterForward reshard_after_forward;
  MixedPrecisionPolicy mp_policy;
  bool cpu_offload = false;  // CPUOffloadPolicy
  bool pin_memory = true;
};

}  // namespace fullshard
