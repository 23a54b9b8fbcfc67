#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace fullshard {

// Element types a tensor can have. Floating types are what FSDP2 casts between; kUInt8 is
// what an all-gather of mixed dtypes runs as; kInt64 holds token ids.
enum class DType : uint8_t { kFloat32, kBFloat16, kFloat16, kUInt8, kInt64 };

constexpr uint64_t dtype_size(DType d) {
  switch (d) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kUInt8: return 1;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType d);  // "fp32", "bf16", "fp16", "uint8", "int64"
// Accepts "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16".
std::optional<DType> parse_float_dtype(std::string_view s);

}  // namespace fullshard
