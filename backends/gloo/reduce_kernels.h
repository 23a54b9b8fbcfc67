#pragma once
// Element-wise kernels of a ring reduction (docs/gloo-backend.md, "Reduction order").
//
// A reduction over a group of N ranks visits the members in a fixed order; each visit is one
// *step* that combines the partial result received so far with this rank's contribution:
//   first member:  partial = round(pre(x))
//   next members:  partial = round(combine(float(partial), pre(x)))
//   last member:   result  = round(finish(combine(float(partial), pre(x))))
// where, in fp32: pre(x) = x * float(scale) for kPremulSum and x otherwise; combine is + (kSum,
// kAvg, kPremulSum) or max (kMax, NaN-propagating); finish divides by N for kAvg and is the
// identity otherwise; round() converts to the wire dtype with round-to-nearest-even
// (core/tensor/float_convert.h; the identity for fp32). Partials travel in the wire dtype,
// so bf16/fp16 results are rounded once per step, as NCCL's ring does.
#include <cstddef>

#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace fullshard::gloo_backend {

struct ReduceSpec {
  DType dtype = DType::kFloat32;  // fp32, bf16 or fp16
  ReduceOp op = ReduceOp::kSum;
  float scale = 1.0f;  // kPremulSum factor
  int group_size = 1;  // kAvg divisor
};

// True when the dtype can be reduced (fp32, bf16, fp16).
bool reducible(DType dtype);

// dst[i] = round(pre(x[i])), or, with `last` (a group of one), round(finish(pre(x[i]))).
// dst may equal x.
void reduce_first(const ReduceSpec& spec, void* dst, const void* x, size_t n, bool last);

// dst[i] = round(combine(partial[i], pre(x[i]))), with finish() when `last`.
// dst may equal partial or x (element-wise in place).
void reduce_step(const ReduceSpec& spec, void* dst, const void* partial, const void* x, size_t n,
                 bool last);

// True when pre() is the identity, so a first step may send x as is (no kernel needed).
inline bool first_step_is_identity(const ReduceSpec& spec) {
  return spec.op != ReduceOp::kPremulSum;
}

}  // namespace fullshard::gloo_backend
