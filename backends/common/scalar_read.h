#pragma once
// read_scalar (loss.item()): the value of a one-element floating tensor, as both real backends
// return it from take_scalars().
#include "core/tensor/dtype.h"

namespace fullshard::backends {

// InternalError unless `dtype` is fp32, bf16 or fp16 (read_scalar of a non-floating tensor).
void check_scalar_dtype(DType dtype);
// The value of the element at `p` (host memory) of `dtype` (checked as above), widened exactly.
double decode_scalar(const void* p, DType dtype);

}  // namespace fullshard::backends
