#include "core/tensor/dtype.h"

namespace fullshard {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    case DType::kUInt8: return "uint8";
    case DType::kInt64: return "int64";
    case DType::kFloat8E4M3FN: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
  }
  return "?";
}

std::optional<DType> parse_float_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32") return DType::kFloat32;
  if (s == "bf16" || s == "bfloat16") return DType::kBFloat16;
  if (s == "fp16" || s == "float16") return DType::kFloat16;
  return std::nullopt;
}

}  // namespace fullshard
