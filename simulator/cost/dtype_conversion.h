#pragma once
// Which kernels convert dtypes as they stream (NOTE [Converting kernels]), decided from the
// dtypes and element counts of the tensors a kernel reads and writes, for every op kind alike.
#include <vector>

#include "core/runtime/op.h"

namespace fullshard::sim {

// NOTE [Converting kernels]: eager PyTorch on CUDA runs an elementwise kernel whose operands
// differ in dtype through TensorIterator's dynamic-casting loop (each element loaded and cast
// alone, no vectorised loads), except the narrowing copies fp32 -> bf16 / fp16, which have a
// vectorised kernel of their own (aten/src/ATen/native/cuda/Copy.cu, bfloat16_copy_kernel_cuda;
// the widening copies have one on ROCm only). The H200 run of 2026-11-28 timed exactly that:
// bf16 -> fp32 casts at about half a same-dtype copy's bandwidth, the fp32 -> bf16 cast at a
// copy's (docs/cost-model.md, "The H200 fit"). So a kernel converts when, among its floating
// tensors as large as its largest floating output (the element stream; a reduction's result,
// a norm's rstd or a broadcast operand is not part of it), an input is narrower than an output
// or two inputs differ in dtype. Integer tensors (token ids, labels) never count. The compute
// model prices a converting memory-bound kernel at memory_efficiency x convert_memory_factor.
bool converts_dtype(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs);

}  // namespace fullshard::sim
