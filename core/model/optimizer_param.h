#pragma once
// What an optimizer and gradient clipping see of one parameter: torch.optim's view of a
// (sharded) DTensor parameter, i.e. this rank's local tensor (`to_local()`), its gradient, and
// the module parameter it belongs to. FSDPParam implements it, so core/optim needs nothing of
// core/fsdp.
#include "core/model/module.h"

namespace fullshard {

class OptimizerParam {
 public:
  virtual ~OptimizerParam() = default;
  virtual const Param& param() const = 0;
  // This rank's unpadded local shard: the tensor the optimizer updates in place.
  virtual Tensor local_tensor() const = 0;
  // Its gradient after the reduce-scatter (empty when the parameter got none this step).
  virtual Tensor& local_grad() = 0;
  virtual const Tensor& local_grad() const = 0;
};

}  // namespace fullshard
