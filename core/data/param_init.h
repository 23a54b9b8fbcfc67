#pragma once
// The definition of OpKind::kInitParam (NOTE [Sharding-independent init] in
// core/model/module.h) that every real backend reproduces bit for bit: element g of the full
// parameter is a pure function of (key, g). Backends compute it on the host (double-precision
// log/cos are not bit-identical between the host's libm and a GPU) and copy it in.
#include <cstdint>
#include <vector>

#include "core/runtime/op.h"

namespace fullshard {

// The initial value of element `index` (flat, row-major) of a parameter initialised with
// `init` (ParamInit), `std`, `key`. Exposed for tests.
float init_value(int64_t init, double std, uint64_t key, int64_t index);

// The fp32 values of op.outputs[0] (a 1-D padded shard: op.outputs[0].meta.numel() values)
// as op.iargs / op.fargs say; padding rows are 0. The backend rounds them to the dtype.
std::vector<float> init_param_values(const OpCall& op);

}  // namespace fullshard
