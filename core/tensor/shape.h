#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"

namespace fullshard {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[4096, 4096]"

// Metadata of a tensor: dtype and shape, contiguous. Bytes are numel * element size.
struct TensorMeta {
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t numel() const { return fullshard::numel(shape); }
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

}  // namespace fullshard
