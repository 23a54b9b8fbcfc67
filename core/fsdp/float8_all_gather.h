#pragma once
// FSDP2's float8 all-gather through torchao's WeightWithDynamicFloat8CastTensor
// (torchao/float8/fsdp_utils.py at pytorch/ao@36027d8): fsdp_pre_all_gather casts the
// weight's shard to float8 e4m3 (tensorwise) and returns its scale as metadata;
// fsdp_post_all_gather wraps the gathered bytes as the unsharded weight. NOTE [Float8
// all-gather] in float8_all_gather.cc; docs/float8.md.
#include <string>
#include <vector>

#include "core/fsdp/fsdp_param.h"

namespace fullshard {

// fsdp_pre_all_gather of `p` on `stream` (the all-gather copy-in stream): the float8 shard
// [padded numel], its scale kept by `p` (float8_scale()). Without a precomputed scale the
// amax is all-reduced (MAX) over `group` first (hp_tensor_to_float8_dynamic, reduce_amax).
Tensor float8_pre_all_gather(Backend& b, FSDPParam& p, const ProcessGroup& group, StreamRole stream,
                             const std::string& name);

// precompute_float8_dynamic_scale_for_fsdp after the optimizer step: the amax of every
// float8-all-gathered weight's shard (torch._foreach_norm, ord=inf), stacked, one all-reduce
// (MAX) over `group`, and each weight's scale as a view of the result.
void precompute_float8_dynamic_scale_for_fsdp(Backend& b, const std::vector<FSDPParam*>& params,
                                              const ProcessGroup& group);

}  // namespace fullshard
