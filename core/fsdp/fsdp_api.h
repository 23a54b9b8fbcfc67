#pragma once
// The options of fully_shard, as torch.distributed.fsdp's _fsdp_api.py defines them.
#include <map>
#include <optional>
#include <set>

#include "core/mesh/device_mesh.h"

#include "core/tensor/dtype.h"

namespace fullshard {

class Tensor;
struct Param;

// training.init "device" (NOTE [Initialisation modes] in core/train/model_init.cc): the full
// tensors a model built on the device holds before fully_shard, by parameter.
using DeviceParams = std::map<const Param*, Tensor>;

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
  // fully_shard(mesh=...): the group this call shards over instead of the mesh's shard dim
  // (torchtitan shards the routed experts over the efsdp mesh); unset: the shard dim.
  std::optional<ProcessGroup> shard_group;
  // shard_placement_fn returning Shard(shard_dim) for every parameter of the call (0: FSDP2's
  // default Shard(0); torchtitan's experts get Shard(1) when efsdp exceeds the experts per rank).
  int shard_dim = 0;
  // FSDPModule.set_gradient_divide_factor: divide the gradients by this instead of the data-
  // parallel size of the call's own mesh (torchtitan sets the dense data-parallel size on the
  // experts, so they average over every rank's tokens). 0: unset.
  int gradient_divide_factor = 0;
  // A model built on the device in full: each shard is copied from its parameter's full tensor
  // (new_zeros + copy_, FSDPParam._init_sharded_param), and fully_shard drops the call's full
  // tensors when it returns, as PyTorch frees them when their last reference goes. Null: the
  // meta-device init (each shard initialised in place).
  DeviceParams* device_params = nullptr;
  // ignored_params: parameters this call leaves to the script (NOTE [Ignored parameters] in
  // ignored_param.h); each becomes an IgnoredParam when the call reaches it unclaimed.
  std::set<const Param*> ignored_params;
};

}  // namespace fullshard
