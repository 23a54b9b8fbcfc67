#pragma once
// Which CUDA stream priority each StreamRole gets (pure; stream_set.cc creates the streams).
//
// NOTE [Stream priorities]: FSDP2 (FSDPCommContext.lazy_init in torch/distributed/fsdp/
// _fully_shard/_fsdp_param_group.py) creates all_gather_copy_in_stream, all_gather_stream and
// reduce_scatter_stream with priority=-1 ("high") and all_reduce_stream at normal priority, so
// that communication kernels are scheduled ahead of compute kernels queued earlier and the
// overlap FSDP is built for happens (docs/fsdp2-reference.md, Streams). CUDA numbers priorities
// downwards: cudaDeviceGetStreamPriorityRange gives least (0) and greatest (e.g. -5); -1 is
// clamped into that range, as torch.cuda.Stream(priority=-1) is. The compute stream and the
// offload copy streams keep the default (least) priority.
#include "core/runtime/stream.h"

namespace fullshard::cuda {

inline constexpr int kFsdpHighPriority = -1;

constexpr bool is_high_priority(StreamRole r) {
  return r == StreamRole::kAllGatherCopyIn || r == StreamRole::kAllGather ||
         r == StreamRole::kReduceScatter;
}

// `least` and `greatest` as cudaDeviceGetStreamPriorityRange returns them (greatest <= least).
constexpr int stream_priority(StreamRole r, int least, int greatest) {
  if (!is_high_priority(r)) return least;
  int p = kFsdpHighPriority;
  if (p < greatest) p = greatest;
  if (p > least) p = least;
  return p;
}

}  // namespace fullshard::cuda
