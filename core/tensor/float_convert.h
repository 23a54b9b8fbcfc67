#pragma once
// bf16 / fp16 <-> fp32 conversions with round-to-nearest-even, as a GPU's conversion
// instructions (and torch's .to(dtype)) do. Real backends store bf16/fp16 and compute in fp32.
#include <bit>
#include <cmath>
#include <cstdint>

namespace fullshard {

inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24.
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_fp16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (u >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (u < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: round |f| / 2^-24 to the nearest integer, ties even.
    float a = std::bit_cast<float>(u);
    float q = std::nearbyint(a * 16777216.0f);  // default rounding mode: ties to even
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits, ties to even.
  uint32_t r = u + 0xfffu + ((u >> 13) & 1u);
  return sign | static_cast<uint16_t>(((r >> 13) - (112u << 10)) & 0xffffu);
}

}  // namespace fullshard
