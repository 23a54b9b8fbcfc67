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
#include <algorithm>
#include <cmath>
#include <cstdint>

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

inline float float8_to_float(uint8_t code, const Float8Format& f) {
  const bool negative = code & 0x80;
  const int mant = code & ((1 << f.mantissa_bits) - 1);
  const int exp = (code & 0x7F) >> f.mantissa_bits;
  const int exp_all_ones = (0x7F >> f.mantissa_bits);
  float v;
  if (f.has_infinity && exp == exp_all_ones)
    v = mant == 0 ? INFINITY : NAN;
  else if (!f.has_infinity && exp == exp_all_ones && mant == (1 << f.mantissa_bits) - 1)
    v = NAN;
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), 1 - f.bias - f.mantissa_bits);
  else
    v = std::ldexp(static_cast<float>(mant + (1 << f.mantissa_bits)),
                   exp - f.bias - f.mantissa_bits);
  return negative ? -v : v;
}

inline uint8_t float_to_float8(float x, const Float8Format& f, bool saturate) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const uint8_t max_code =
      static_cast<uint8_t>((f.max_exponent_field << f.mantissa_bits) | f.max_mantissa);
  const uint8_t overflow = saturate         ? max_code
                           : f.has_infinity ? (0x7F & ~((1 << f.mantissa_bits) - 1))
                                            : 0x7F;
  if (std::isnan(x)) return sign | 0x7F;
  if (std::isinf(x)) return sign | overflow;
  double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  // a = n * 2^(e - M) with n rounded to an integer of M + 1 bits (fewer below the normal range).
  int e2 = 0;
  std::frexp(a, &e2);
  int e = std::max(e2 - 1, 1 - f.bias);
  double n = std::nearbyint(std::ldexp(a, f.mantissa_bits - e));  // ties to even (default mode)
  if (n >= static_cast<double>(2 << f.mantissa_bits)) {           // rounded up to the next binade
    n /= 2;
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

inline float e4m3fn_to_float(uint8_t code) { return float8_to_float(code, kFloat8E4M3FN); }
inline float e5m2_to_float(uint8_t code) { return float8_to_float(code, kFloat8E5M2); }
inline uint8_t float_to_e4m3fn(float x, bool saturate = false) {
  return float_to_float8(x, kFloat8E4M3FN, saturate);
}
inline uint8_t float_to_e5m2(float x, bool saturate = false) {
  return float_to_float8(x, kFloat8E5M2, saturate);
}

}  // namespace fullshard
