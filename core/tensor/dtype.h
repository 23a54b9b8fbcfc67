#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace fullshard {

// Element types a tensor can have. Floating types are what FSDP2 casts between; kUInt8 is
// what an all-gather of mixed dtypes runs as; kInt64 holds token ids. The float8 types
// (torch.float8_e4m3fn, torch.float8_e5m2) are torchao's float8 training casts; their scales
// are fp32 tensors (one element tensorwise, one per row or column axiswise). Conversions:
// core/tensor/float8.h.
enum class DType : uint8_t {
  kFloat32,
  kBFloat16,
  kFloat16,
  kUInt8,
  kInt64,
  kFloat8E4M3FN,
  kFloat8E5M2
};

constexpr uint64_t dtype_size(DType d) {
  switch (d) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kUInt8: return 1;
    case DType::kInt64: return 8;
    case DType::kFloat8E4M3FN: return 1;
    case DType::kFloat8E5M2: return 1;
  }
  return 0;
}

constexpr bool is_float8(DType d) { return d == DType::kFloat8E4M3FN || d == DType::kFloat8E5M2; }

// "fp32", "bf16", "fp16", "uint8", "int64", "float8_e4m3fn", "float8_e5m2"
std::string_view dtype_name(DType d);
// Accepts "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16".
std::optional<DType> parse_float_dtype(std::string_view s);

}  // namespace fullshard
