#pragma once
// float8 e4m3fn and e5m2 <-> fp32, bit for bit as torch's .to(dtype) and torchao's saturated
// casts (tests/unit/tensor_float8_test.cc against tests/data/oracle/float8_casts.bin).
//
// NOTE [Float8 conversion rules]: both formats round to nearest, ties to even, with subnormals.
// e4m3fn (1-4-3, bias 7) has no infinities: 0x7F / 0xFF is NaN and the largest finite value is
// 448, so a value that rounds above 448 (anything above 464), and +-inf, become NaN (sign kept).
// e5m2 (1-5-2, bias 15) is IEEE-like: above 57344 rounds to +-inf (from 61440 up), and NaN is
// 0x7F / 0xFF. The saturated cast (torchao's `to_fp8_saturated`, i.e. clamp to +-max, then cast)
// gives +-max instead of NaN or inf for out-of-range and infinite inputs; NaN stays NaN.
// The conversions are FULLSHARD_HOST_DEVICE integer arithmetic on the fp32 bits (no libm), so
// the CUDA cast kernels (backends/cuda/kernels/float8.cu) run this very code.
#include <cstdint>
#include <cstring>

#include "core/common/host_device.h"

namespace fullshard {

struct Float8Format {
  int mantissa_bits;
  int bias;
  int max_exponent_field;  // of the largest finite value
  int max_mantissa;        // its mantissa field
  bool has_infinity;       // e5m2: exponent field all ones, mantissa 0
};

inline constexpr Float8Format kFloat8E4M3FN{3, 7, 15, 6, false};
inline constexpr Float8Format kFloat8E5M2{2, 15, 30, 3, true};

FULLSHARD_HOST_DEVICE inline uint32_t float8_detail_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}
FULLSHARD_HOST_DEVICE inline float float8_detail_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}
// 2^k for a k in fp32's normal range (every float8 value's exponent is).
FULLSHARD_HOST_DEVICE inline float float8_detail_pow2(int k) {
  return float8_detail_float(static_cast<uint32_t>(k + 127) << 23);
}

FULLSHARD_HOST_DEVICE inline float float8_to_float(uint8_t code, const Float8Format& f) {
  const bool negative = code & 0x80;
  const int mant = code & ((1 << f.mantissa_bits) - 1);
  const int exp = (code & 0x7F) >> f.mantissa_bits;
  const int exp_all_ones = (0x7F >> f.mantissa_bits);
  float v;
  if ((f.has_infinity && exp == exp_all_ones && mant != 0) ||
      (!f.has_infinity && exp == exp_all_ones && mant == (1 << f.mantissa_bits) - 1))
    v = float8_detail_float(0x7FC00000u);  // NaN
  else if (f.has_infinity && exp == exp_all_ones)
    v = float8_detail_float(0x7F800000u);  // inf
  else if (exp == 0)                       // exact: mant < 8, a power of two in fp32's range
    v = static_cast<float>(mant) * float8_detail_pow2(1 - f.bias - f.mantissa_bits);
  else
    v = static_cast<float>(mant + (1 << f.mantissa_bits)) *
        float8_detail_pow2(exp - f.bias - f.mantissa_bits);
  return negative ? -v : v;
}

FULLSHARD_HOST_DEVICE inline uint8_t float_to_float8(float x, const Float8Format& f,
                                                     bool saturate) {
  const uint32_t u = float8_detail_bits(x);
  const uint8_t sign = (u >> 31) ? 0x80 : 0x00;
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint8_t max_code =
      static_cast<uint8_t>((f.max_exponent_field << f.mantissa_bits) | f.max_mantissa);
  const uint8_t overflow = saturate         ? max_code
                           : f.has_infinity ? (0x7F & ~((1 << f.mantissa_bits) - 1))
                                            : 0x7F;
  if (a > 0x7F800000u) return sign | 0x7F;       // NaN
  if (a == 0x7F800000u) return sign | overflow;  // inf
  if (a < 0x00800000u) return sign;  // zero or an fp32 subnormal: far below half of 2^-16
  // |x| = sig * 2^(e2 - 23), sig of 24 bits; n = |x| * 2^(M - e) rounded to nearest even, with e
  // the exponent of x clamped to the format's subnormal exponent (fewer bits below it).
  const int e2 = static_cast<int>(a >> 23) - 127;
  const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
  int e = e2 > 1 - f.bias ? e2 : 1 - f.bias;
  const int shift = 23 - f.mantissa_bits + (e - e2);  // >= 21: sig >> shift drops bits
  uint32_t n = 0;
  if (shift < 32) {
    n = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (n & 1u))) ++n;
  }
  if (n >= (2u << f.mantissa_bits)) {  // rounded up to the next binade
    n >>= 1;
    ++e;
  }
  const int m = static_cast<int>(n);
  if (m < (1 << f.mantissa_bits)) return sign | static_cast<uint8_t>(m);  // subnormal or zero
  const int exp_field = e + f.bias;
  const int mant = m - (1 << f.mantissa_bits);
  if (exp_field > f.max_exponent_field ||
      (exp_field == f.max_exponent_field && mant > f.max_mantissa))
    return sign | overflow;
  return sign | static_cast<uint8_t>((exp_field << f.mantissa_bits) | mant);
}

FULLSHARD_HOST_DEVICE inline float e4m3fn_to_float(uint8_t code) {
  return float8_to_float(code, kFloat8E4M3FN);
}
FULLSHARD_HOST_DEVICE inline float e5m2_to_float(uint8_t code) {
  return float8_to_float(code, kFloat8E5M2);
}
FULLSHARD_HOST_DEVICE inline uint8_t float_to_e4m3fn(float x, bool saturate = false) {
  return float_to_float8(x, kFloat8E4M3FN, saturate);
}
FULLSHARD_HOST_DEVICE inline uint8_t float_to_e5m2(float x, bool saturate = false) {
  return float_to_float8(x, kFloat8E5M2, saturate);
}

}  // namespace fullshard
