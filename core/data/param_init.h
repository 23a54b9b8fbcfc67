#pragma once
// The definition of OpKind::kInitParam (NOTE [Sharding-independent init] in
// core/model/module.h) that every real backend reproduces bit for bit: element g of the full
// parameter is a pure function of (key, g) (core/data/init_generator.h), computed here on the
// host and by the CUDA backend's kernel on the device (NOTE [Bit-identical init on host and
// device]).
#include <cstdint>
#include <vector>

#include "core/data/init_generator.h"
#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace fullshard {

// The initial value of element `index` (flat, row-major) of a parameter initialised with
// `init` (ParamInit), `std`, `key`. Exposed for tests.
float init_value(int64_t init, double std, uint64_t key, int64_t index);

// The standard-normal pair of elements 2p and 2p+1 of a parameter with `key`, in double before
// any rounding (the host's copy of the generator, compiled without contraction). For tests.
init_gen::NormalPair init_normal_pair(uint64_t key, uint64_t p);

// What a kInitParam op asks for (op.iargs / op.fargs decoded and checked; its output's numel).
init_gen::InitSpec init_spec(const OpCall& op);

// Writes all spec.numel elements (padding rows 0) rounded to `dtype` (fp32, bf16 or fp16,
// nearest even) into `out`, on up to `threads` threads (the caller's included). The bytes do
// not depend on the thread count.
void fill_init_param(const init_gen::InitSpec& spec, DType dtype, void* out, int threads = 1);

// OpKind::kInitParam into `out` (op.outputs[0]'s storage).
void run_init_param(const OpCall& op, void* out, int threads = 1);

// The fp32 values of op.outputs[0] (a 1-D padded shard: op.outputs[0].meta.numel() values)
// as op.iargs / op.fargs say; padding rows are 0.
std::vector<float> init_param_values(const OpCall& op);

// Threads a rank may use for host init: the host's cores shared among the ranks on it
// (LOCAL_WORLD_SIZE, 1 when unset), at least 1.
int host_init_threads();

}  // namespace fullshard
