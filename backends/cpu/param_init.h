#pragma once
// The real kernel of OpKind::kInitParam (NOTE [Sharding-independent init] in
// core/model/module.h): element g of the full parameter is a pure function of (key, g).
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard::cpu {

// The initial value of element `index` (flat, row-major) of a parameter initialised with
// `init` (ParamInit), `std`, `key`. Exposed for tests.
float init_value(int64_t init, double std, uint64_t key, int64_t index);

// Fills `out` (op.outputs[0], 1-D padded shard) as op.iargs / op.fargs say.
void run_init_param(const OpCall& op, void* out);

}  // namespace fullshard::cpu
