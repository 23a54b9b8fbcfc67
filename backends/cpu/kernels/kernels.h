#pragma once
// Real CPU implementations of the OpKinds the host program launches (core/runtime/op.h):
// the kernels the CPU backend's compute stream runs. Storage may be fp32, bf16 or fp16;
// math is fp32 and results are rounded to the output dtype with round-to-nearest-even
// (core/tensor/float_convert.h), as a GPU kernel with fp32 accumulation does.
#include <vector>

#include "core/runtime/op.h"

namespace fullshard::cpu {

// Runs `op` on resolved addresses: in[i] is the first element of op.inputs[i] (buffer base +
// offset_bytes), out[i] of op.outputs[i]. An in-place op lists the same tensor in both.
// kLoadBatch is not handled here (the backend fills batches from its data source).
// Throws InternalError for an OpKind or argument layout it does not know.
void run_kernel(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out);

// True for the kinds run_kernel implements.
bool has_kernel(OpKind kind);

}  // namespace fullshard::cpu
