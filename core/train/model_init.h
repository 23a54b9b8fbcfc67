#pragma once
// How a rank's parameters get their initial values before the first step (training.init):
// the device memory of start-up (NOTE [Initialisation modes] in model_init.cc).
#include "core/fsdp/fsdp_api.h"
#include "core/model/module.h"
#include "core/runtime/backend_storage.h"
#include "core/runtime/backend.h"

namespace fullshard {

// A model built on the device (`with torch.device("cuda"): model = Transformer(...)`): every
// parameter's full tensor allocated and initialised, in module order, before fully_shard
// (FullyShardOptions::device_params).
DeviceParams build_on_device(Backend& b, Module& root);

// set_model_state_dict(model, full_sd, StateDictOptions(full_state_dict=True,
// broadcast_from_rank0=True)) on a sharded model: for each parameter in state-dict order, a full
// tensor on every rank (rank 0's copied from its host state dict), broadcast from rank 0 over
// `world`, this rank's rows copied into its shard, the full tensor freed.
void load_full_state_from_rank0(Backend& b, Module& root, const ProcessGroup& world);

}  // namespace fullshard
