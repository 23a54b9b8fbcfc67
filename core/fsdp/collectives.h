#pragma once
// FSDP2's collectives (_fsdp_collectives.py): all-gather copy-in / all-gather / copy-out,
// and the reduce-scatter (+ HSDP all-reduce) of a parameter group's gradients. Every
// cross-stream buffer travels with its event (NOTE [Buffers travel with events]).
#include <optional>
#include <vector>

#include "core/fsdp/fsdp_param.h"
#include "core/fsdp/reduce_policy.h"

namespace fullshard {

// NOTE [Buffers travel with events]: a buffer allocated from one stream's pool and used on
// another is only dropped (freed on the host) after the pool's stream has waited on an
// event recorded after the last use. FSDP2 never calls record_stream; these structs keep
// the buffer alive until that wait (AllGatherState, ReduceScatterState, AllReduceState).
struct AllGatherResult {
  Tensor output;      // flat W x N buffer, allocated on the copy-in stream's pool
  EventId event = 0;  // recorded on the all-gather stream after the collective
  int world = 1;      // group size of this all-gather (post-forward groups are smaller)
  std::vector<int64_t> input_numels;  // per parameter, in one rank's row
  DType dtype = DType::kFloat32;
  // all_gather_work is not None: issued with async_op=True (NOTE [Async unshard] in
  // fsdp_param_group.cc); wait_for_unshard then never defers the output's free.
  bool async_op = false;
};

struct BufferWithEvent {
  Tensor buffer;
  EventId event = 0;
};

struct AllGatherStreams {
  StreamRole copy_in = StreamRole::kAllGatherCopyIn;
  StreamRole all_gather = StreamRole::kAllGather;
};

// Copy-in + all-gather of the group's parameters. From the post-forward shards when
// `post_forward` (over `group`, the smaller post-forward group), else from the sharded
// data (H2D first with offload; cast to param dtype with mixed precision).
AllGatherResult foreach_all_gather(Backend& b, const std::vector<FSDPParam*>& params,
                                   const ProcessGroup& group, bool post_forward,
                                   AllGatherStreams streams, const std::string& name);

// Waits for the all-gather on the current stream, allocates every parameter's unsharded
// storage and de-interleaves the output into them (split_with_sizes_copy).
void foreach_all_gather_copy_out(Backend& b, const AllGatherResult& r,
                                 const std::vector<FSDPParam*>& params, const std::string& name);

struct ReduceOptions {
  const ProcessGroup* reduce_scatter_group = nullptr;
  const ProcessGroup* all_reduce_group = nullptr;  // HSDP replicate group, or null
  DType reduce_dtype = DType::kFloat32;
  DivideFactors factors;
  // FSDPParamGroup.gradient_divide_factor as set (absent: none): with a one-rank reduce-scatter
  // group the copy that replaces the collective divides by it (NOTE [World-size-1 shortcut]).
  std::optional<double> gradient_divide_factor;
  // NOTE [Partial reduce without all-reduce]: FSDPModule.set_requires_all_reduce(False) under
  // HSDP. The reduce-scatter runs; its output is summed into `partial_reduce_output` (the first
  // one becomes it) on the reduce-scatter stream, and nothing else happens: no all-reduce, no
  // post-divide, no sharded gradient. The next reduction with all-reduce on adds the partial sum
  // into its reduce-scatter output before all-reducing, as foreach_reduce in
  // _fsdp_collectives.py. Without a replicate group the flag changes nothing.
  bool all_reduce_grads = true;
  Tensor partial_reduce_output;
};

struct ReduceResult {
  BufferWithEvent reduce_scatter_input;  // hold until the next group's RS waits on it
  EventId post_reduce_event = 0;
  std::optional<BufferWithEvent> all_reduce_input;  // HSDP: hold until finalize
  std::vector<EventId> grad_offload_events;         // CPU offload D2H copies
  Tensor partial_reduce_output;  // the running sum to keep (set only when not all-reducing)
};

// Reduce-scatters `grads` (one per entry of `params`, unsharded, possibly of different
// dtype than reduce_dtype), then all-reduces over the replicate group for HSDP, and sets
// or accumulates every parameter's sharded gradient.
ReduceResult foreach_reduce(Backend& b, const std::vector<FSDPParam*>& params,
                            std::vector<Tensor> grads, const ReduceOptions& options,
                            const std::string& name);

}  // namespace fullshard
