#pragma once
// OpKind::kInitParam on the device (init_param.cu): the CUDA backend's launch of the init
// generator (core/data/init_generator.h), bit-identical to the host's fill_init_param.
#include <cuda_runtime_api.h>

#include "core/data/init_generator.h"
#include "core/tensor/dtype.h"

namespace fullshard::cuda::launch {

// All spec.numel elements of `out` (padding rows 0) in `dt` (fp32, bf16 or fp16; the caller
// checks), rounded to nearest even. Only enqueues on `s`.
void init_param(const init_gen::InitSpec& spec, DType dt, void* out, cudaStream_t s);

}  // namespace fullshard::cuda::launch
