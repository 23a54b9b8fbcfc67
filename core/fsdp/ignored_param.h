#pragma once
// A parameter fully_shard ignores (FSDP2's ignored_params): the whole tensor on every rank's
// device, outside every FSDPParamGroup. It is the ParamBinding the model reads it through.
#include "core/model/module.h"

namespace fullshard {

// NOTE [Ignored parameters]: fully_shard(module, ignored_params={...}) (PyTorch main,
// torch/distributed/fsdp/_fully_shard/_fully_shard.py, and _fsdp_init.py's
// _get_managed_states, which skips them, and _adjust_managed_modules, which drops a module whose
// parameters are all ignored from the managed modules) leaves those parameters as the plain
// tensors they were: no FSDPParam, so no sharding, all-gather, reduce-scatter or mixed-precision
// cast (the cast happens only in the all-gather copy-in of managed parameters), and
// _move_states_to_device moves only managed states, so the script keeps them where it put them.
// fullshard keeps each one whole on every rank's device from init (allocated and initialised in
// place with the meta init, or the model-on-device's full tensor kept), in its own dtype; the
// state's hooks still run on the module (the input cast of cast_forward_inputs included).
// Their gradients would be local, never reduced by FSDP: fullshard builds only frozen ignored
// parameters (the scenario refuses a trainable one, NOTE [What ignored parameters compose
// with] in core/scenario/scenario_ignored.cc), so the replicas cannot drift.
class IgnoredParam : public ParamBinding {
 public:
  // Allocates `param`'s whole tensor (MemCategory::kUnshardedParam) and initialises it, or
  // takes `full` (training.init "device": the model's tensor on the device) as it is.
  IgnoredParam(Backend& backend, Param& param, Tensor* full = nullptr);

  // ---- ParamBinding ----
  Tensor unsharded() const override { return data_.view(TensorMeta{param_->dtype, param_->shape}); }
  DType compute_dtype() const override { return param_->dtype; }
  bool has_unsharded_grad() const override { return false; }
  void accumulate_grad(Backend& backend, Tensor grad) override;

  const Param& param() const { return *param_; }
  const Tensor& data() const { return data_; }  // 1-D, numel(param.shape) elements

 private:
  Param* param_;
  Tensor data_;
};

}  // namespace fullshard
