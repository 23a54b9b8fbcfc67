#pragma once
// FSDPModule.unshard(async_op=True)'s handle (torch/distributed/fsdp/_fully_shard/
// _fully_shard.py: UnshardHandle, _UnshardHandleImpl). NOTE [Async unshard] in
// fsdp_param_group.cc.
#include "core/fsdp/fsdp_param_group.h"

namespace fullshard {

class UnshardHandle {
 public:
  explicit UnshardHandle(FSDPParamGroup* group) : group_(group) {}
  // Waits on the unshard: the group's wait_for_unshard (the current stream waits for the
  // all-gather and copies out), then forgets the group, so a second wait does nothing. A module
  // whose pre-forward runs first has already waited: wait_for_unshard then finds no result.
  void wait() {
    if (!group_) return;
    group_->wait_for_unshard();
    group_ = nullptr;
  }

 private:
  FSDPParamGroup* group_;  // null: a module with no parameter group, or already waited
};

}  // namespace fullshard
