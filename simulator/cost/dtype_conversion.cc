#include "simulator/cost/dtype_conversion.h"

#include <algorithm>

namespace fullshard::sim {
namespace {

bool is_floating(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

}  // namespace

bool converts_dtype(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs) {
  int64_t stream = 0;  // the largest floating output's element count
  for (const TensorRef& t : outputs)
    if (is_floating(t.meta.dtype)) stream = std::max(stream, t.meta.numel());
  if (stream == 0) return false;
  auto in_stream = [&](const TensorRef& t) {
    return is_floating(t.meta.dtype) && t.meta.numel() == stream;
  };
  // The widest output in the stream: an input narrower than it widens (linear in the tensors;
  // the foreach optimizer step lists thousands).
  size_t widest_out = 0;
  for (const TensorRef& out : outputs)
    if (in_stream(out)) widest_out = std::max(widest_out, dtype_size(out.meta.dtype));
  const TensorRef* first = nullptr;
  for (const TensorRef& in : inputs) {
    if (!in_stream(in)) continue;
    if (first != nullptr && in.meta.dtype != first->meta.dtype) return true;  // mixed reads
    if (first == nullptr) first = &in;
    if (dtype_size(in.meta.dtype) < widest_out) return true;  // widening
  }
  return false;
}

}  // namespace fullshard::sim
