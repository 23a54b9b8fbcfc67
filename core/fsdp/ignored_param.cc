#include "core/fsdp/ignored_param.h"

#include "core/common/error.h"
#include "core/model/ops.h"

namespace fullshard {

IgnoredParam::IgnoredParam(Backend& b, Param& param, Tensor* full) : param_(&param) {
  FULLSHARD_CHECK(param.binding == nullptr, param.fqn + " is already bound");
  const TensorMeta meta{param.dtype, {fullshard::numel(param.shape)}};
  if (full) {
    FULLSHARD_CHECK(full->dtype() == param.dtype && full->numel() == meta.numel(),
                    param.fqn + ": the full tensor on the device is not the parameter's");
    data_ = std::move(*full);
  } else {  // to_empty + init_weights on the plain tensor: every row, no padding
    data_ = empty_tensor(b, meta, MemCategory::kUnshardedParam, StreamRole::kDefault,
                          param.fqn + " (ignored by FSDP)");
    ops::init_param(b, StreamRole::kDefault, data_, param, 0,
                    param.shape.empty() ? 1 : param.shape[0]);
  }
  param.binding = this;
}

void IgnoredParam::accumulate_grad(Backend&, Tensor) {
  FULLSHARD_CHECK(false, param_->fqn + " is ignored by FSDP and frozen, yet got a gradient");
}

}  // namespace fullshard
