#pragma once
// A view of a buffer, as ops and collectives name their operands: a value, no ownership.
#include <cstdint>

#include "core/tensor/shape.h"

namespace fullshard {

// `meta` elements starting `offset_bytes` into buffer `buffer_id` (0: no buffer).
struct TensorRef {
  uint64_t buffer_id = 0;
  uint64_t offset_bytes = 0;
  TensorMeta meta;
  uint64_t nbytes() const { return meta.nbytes(); }
};

}  // namespace fullshard
