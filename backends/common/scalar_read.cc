#include "backends/common/scalar_read.h"

#include <cstdint>
#include <cstring>

#include "core/common/error.h"
#include "core/tensor/float_convert.h"

namespace fullshard::backends {

void check_scalar_dtype(DType dtype) {
  FULLSHARD_CHECK(dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16,
                  "read_scalar of a non-floating tensor");
}

double decode_scalar(const void* p, DType dtype) {
  check_scalar_dtype(dtype);
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return dtype == DType::kBFloat16 ? bf16_to_float(h) : fp16_to_float(h);
}

}  // namespace fullshard::backends
