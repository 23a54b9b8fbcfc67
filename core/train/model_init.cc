#include "core/train/model_init.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/common/error.h"
#include "core/fsdp/fsdp_param.h"
#include "core/fsdp/ignored_param.h"
#include "core/fsdp/shard_layout.h"
#include "core/model/ops.h"

namespace fullshard {

// NOTE [Initialisation modes]: what the device holds before step 0 (training.init), read
// from FSDP2 and torch/distributed/_state_dict_utils.py (torch 2.11):
// - "meta" (torchtitan): the model is built on the meta device, fully_shard-ed, to_empty'd
//   and init_weights'd, so each rank only ever holds its padded shards.
// - "device": the model is built on the device in full; each fully_shard call allocates its
//   shards (new_zeros + copy_ of this rank's rows, FSDPParam._init_sharded_param) and its full
//   tensors are freed when the call returns. The start-up peak is the whole model in fp32 plus
//   the first unit's shards, and the allocator keeps those segments reserved.
// - "broadcast_from_rank0": "meta", then _broadcast_state_dict: one parameter at a time, a full
//   tensor on every rank (rank 0's copied from its host state dict, here filled as the model's
//   init would), dist.broadcast from rank 0 over the default group, _distribute_tensors' copy
//   of this rank's rows into the shard, the full tensor freed: a transient of the largest
//   parameter. Rank 0's host copy of the state dict is not modelled. An ignored parameter
//   (NOTE [Ignored parameters]) is no DTensor: _broadcast_tensors puts the broadcast tensor
//   itself in the local state dict, which keeps it until load_state_dict copies it into the
//   parameter after every broadcast, so those full tensors are freed together at the end.
// Every mode leaves the same values in the shards (NOTE [Sharding-independent init]).

DeviceParams build_on_device(Backend& b, Module& root) {
  DeviceParams out;
  root.for_each_param([&](Param& p) {
    const int64_t d0 = p.shape.empty() ? 1 : p.shape[0];
    // In the parameter's own dtype: a frozen bf16 base is built in bf16 (NOTE [Frozen
    // parameters] in core/model/lora.cc), not in fp32 and cast.
    Tensor full = empty_tensor(b, TensorMeta{p.dtype, {fullshard::numel(p.shape)}},
                                MemCategory::kUnshardedParam, StreamRole::kDefault,
                                p.fqn + " (full, on the device)");
    ops::init_param(b, StreamRole::kDefault, full, p, 0, d0);
    out.emplace(&p, std::move(full));
  });
  return out;
}

void load_full_state_from_rank0(Backend& b, Module& root, const ProcessGroup& world) {
  std::vector<std::pair<IgnoredParam*, Tensor>> pending;  // ignored parameters' full tensors
  root.for_each_param([&](Param& p) {
    auto* fp = dynamic_cast<FSDPParam*>(p.binding);
    auto* ignored = dynamic_cast<IgnoredParam*>(p.binding);
    FULLSHARD_CHECK((fp && fp->shard_dim() == 0) || ignored,
                    p.fqn + " is neither a Shard(0) FSDP parameter nor an ignored one");
    const int64_t n = fullshard::numel(p.shape);
    const int64_t d0 = p.shape.empty() ? 1 : p.shape[0];
    Tensor full = empty_tensor(b, TensorMeta{p.dtype, {n}}, MemCategory::kUnshardedParam,
                                StreamRole::kDefault, p.fqn + " (full, broadcast from rank 0)");
    if (b.rank() == world.ranks.front())
      ops::init_param(b, StreamRole::kDefault, full, p, 0, d0);  // its host copy, moved over
    CollectiveCall c;
    c.kind = CollectiveKind::kBroadcast;
    c.name = p.fqn + " broadcast_from_rank0";
    c.input = c.output = full.ref();
    c.root = 0;
    b.collective(StreamRole::kDefault, c, world);
    if (ignored) {  // a plain tensor: the state dict holds the broadcast tensor itself
      pending.emplace_back(ignored, std::move(full));
      return;
    }
    const int world_size = fp->shard_world();
    const int rank = fp->shard_rank();
    const int64_t rows = shard_rows(d0, world_size, rank);
    if (rows == 0) return;
    const int64_t row_numel = n / std::max<int64_t>(d0, 1);
    const int64_t k = rows * row_numel;
    const uint64_t from =
        static_cast<uint64_t>(shard_row_offset(d0, world_size, rank) * row_numel) *
        dtype_size(p.dtype);
    ops::copy_into(b, StreamRole::kDefault, fp->sharded_local().view(TensorMeta{p.dtype, {k}}),
                   full.view(TensorMeta{p.dtype, {k}}, from),
                   p.fqn + " shard copy from the full state");
  });
  for (auto& [ignored, full] : pending)  // model.load_state_dict's param.copy_(input_param)
    ops::copy_into(b, StreamRole::kDefault, ignored->data(), full,
                   ignored->param().fqn + " copy from the full state");
}

}  // namespace fullshard
