#pragma once
// fully_shard over a model as a scenario says (torchtitan's apply_fsdp): the units
// (fsdp.units), per-unit options and explicit prefetching. TrainingProgram applies it to the
// whole model, PipelineProgram to each stage's part (with pp on, an unset
// reshard_after_forward is False: torchtitan's policy "default" is `not pp_enabled`).
#include "core/fsdp/fully_shard.h"
#include "core/model/transformer.h"
#include "core/scenario/scenario.h"

namespace fullshard {

// Calls fully_shard on `model`'s units bottom-up and then its root; sets the prefetch lists.
// `device_params`: the full tensors of a model built on the device (training.init "device"),
// consumed unit by unit (FullyShardOptions::device_params).
void apply_fsdp(const Scenario& s, Transformer& model, FSDPRuntime& fsdp, bool pp_enabled,
                DeviceParams* device_params = nullptr);

// The state of a unit named as fsdp.per_unit names it once resolved ("root", "layers.N",
// "tok_embeddings", "output"), after apply_fsdp.
FSDPState& fsdp_unit(Transformer& model, FSDPRuntime& fsdp, const std::string& unit);

}  // namespace fullshard
