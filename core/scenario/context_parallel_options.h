#pragma once
// The "context_parallel" section of a scenario (torchtitan's parallelism.context_parallel_*
// fields). The cp degree is the size of fsdp.mesh's "cp" dim (between dp_shard and tp, as
// torchtitan's ["pp", "dp_replicate", "dp_shard", "cp", "tp"]). Parsed in scenario_cp.cc.
#include "core/model/context_parallel.h"

namespace fullshard {

struct ContextParallelOptions {
  // context_parallel.rotate_method (torchtitan's context_parallel_rotate_method; its default).
  CpRotateMethod rotate_method = CpRotateMethod::kAllGather;
  int degree = 1;  // resolved: the cp dim's size (1: no context parallelism)
  bool enabled() const { return degree > 1; }
};

}  // namespace fullshard
