#pragma once
// The generator behind OpKind::kInitParam: element g of a parameter is a pure function of
// (key, g), computed bit for bit alike by the host compiler (core/data/param_init.cc) and by nvcc
// for the device (backends/cuda/kernels/init_param.cu). Plain data and inline functions only.
#include <cstdint>
#include <cstring>

#include "core/common/host_device.h"
#include "core/common/splitmix.h"

// Internal linkage (static): a translation unit compiled with contraction on (a test) must
// not lend its copy to param_init.cc through the linker's merging of inline functions.
#if defined(__CUDACC__)
#define FULLSHARD_INIT_FN static __host__ __device__ __forceinline__
#else
#define FULLSHARD_INIT_FN static inline __attribute__((always_inline))
#endif

namespace fullshard::init_gen {

// NOTE [Bit-identical init on host and device]: a normal draw is Box-Muller on two 64-bit
// SplitMix64 outputs, every floating step a correctly rounded IEEE double operation (+, -, *,
// /, sqrt) in a fixed order: log is 2 atanh((m-1)/(m+1)) on the mantissa m in [sqrt(1/2),
// sqrt(2)) plus the exponent times ln 2 (split hi/lo); cos and sin are Taylor polynomials on
// [-pi/4, pi/4] after an exact quadrant split (the angle is quadrant * pi/2 + y, uniform on the
// circle). No libm call, whose last bit differs between glibc and CUDA, and no contraction into
// FMA: on the device every step is an __d*_rn intrinsic, which nvcc never fuses; on the host
// param_init.cc is compiled with -ffp-contract=off (CMakeLists.txt). Both compute the same
// double (a few units in its last place from the exact Box-Muller value), round it once to
// float, then to the storage dtype (nearest even). The radius's uniform is an odd multiple of
// 2^-53 (52 random bits; the largest |z| is sqrt(2 * 53 ln 2) = 8.57), the angle's has 54.
// Elements 2p and 2p+1 are the pair (r cos, r sin) of counters 2p and 2p+1: one log and one
// sqrt per two elements. tests/unit/data_param_init_test.cc pins a few values' bits;
// tests/gpu/cuda_init_param_test.cc checks the device against the host, every layout and dtype.

// ParamInit's values (core/model/module.h; param_init.cc static_asserts they agree).
inline constexpr int kNormal = 0, kOnes = 1, kZeros = 2, kUniform = 3;

namespace detail {

FULLSHARD_INIT_FN double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
FULLSHARD_INIT_FN double dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
FULLSHARD_INIT_FN double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FULLSHARD_INIT_FN double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
FULLSHARD_INIT_FN double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);  // sqrtsd: correctly rounded
#endif
}
// Exact for |n| < 2^53.
FULLSHARD_INIT_FN double exact_double(int64_t n) {
#if defined(__CUDA_ARCH__)
  return __ll2double_rn(static_cast<long long>(n));
#else
  return static_cast<double>(n);
#endif
}
FULLSHARD_INIT_FN float to_float(double d) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(d);
#else
  return static_cast<float>(d);
#endif
}
FULLSHARD_INIT_FN uint64_t bits_of(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}
FULLSHARD_INIT_FN double double_of(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}

// a x + b, rounded twice (never fused).
FULLSHARD_INIT_FN double axpb(double a, double x, double b) { return dadd(dmul(a, x), b); }

}  // namespace detail

// log(n * 2^-53) for an integer 1 <= n < 2^53.
FULLSHARD_INIT_FN double log_unit(uint64_t n) {
  using namespace detail;
  const uint64_t b = bits_of(exact_double(static_cast<int64_t>(n)));
  // n = m 2^e with m in [sqrt(1/2), sqrt(2)): the mantissa with exponent 0, or -1 (m / 2, e + 1)
  // above sqrt(2). Integer selects, no branch (a random one costs more than the arithmetic).
  const uint64_t mant = b & 0x000fffffffffffffull;
  const uint64_t above = mant > 0x6a09e667f3bcdull ? 1 : 0;  // m > sqrt(2) = 0x1.6a09e667f3bcdp+0
  const int64_t e = static_cast<int64_t>((b >> 52) & 0x7ff) - 1023 + static_cast<int64_t>(above);
  const double m = double_of(mant | ((1023 - above) << 52));
  // log m = 2 atanh(s) = 2 s (1 + z/3 + z^2/5 + ... + z^9/19), z = s^2 <= 0.0295; m - 1 is exact.
  // Estrin's scheme: a dependency chain of 5 steps where Horner's has 9.
  const double s = ddiv(dsub(m, 1.0), dadd(m, 1.0));
  const double z = dmul(s, s), z2 = dmul(z, z), z4 = dmul(z2, z2), z8 = dmul(z4, z4);
  const double q0 = axpb(0x1.5555555555555p-2, z, 1.0);                   // 1 + z/3
  const double q1 = axpb(0x1.2492492492492p-3, z, 0x1.999999999999ap-3);  // 1/5 + z/7
  const double q2 = axpb(0x1.745d1745d1746p-4, z, 0x1.c71c71c71c71cp-4);  // 1/9 + z/11
  const double q3 = axpb(0x1.1111111111111p-4, z, 0x1.3b13b13b13b14p-4);  // 1/13 + z/15
  const double q4 = axpb(0x1.af286bca1af28p-5, z, 0x1.e1e1e1e1e1e1ep-5);  // 1/17 + z/19
  const double p = axpb(q4, z8, axpb(axpb(q3, z2, q2), z4, axpb(q1, z2, q0)));
  const double log_m = dmul(dmul(2.0, s), p);
  const double j = exact_double(e - 53);
  // ln 2 = hi + lo, hi with 21 trailing zero bits: j * hi is exact.
  return dadd(dmul(j, 0x1.62e42fee00000p-1), dadd(dmul(j, 0x1.a39ef35793c76p-33), log_m));
}

// cos and sin of the angle q * pi/2 + y, where q is the top 2 bits of `bits` and y =
// (odd 53-bit integer from the next 52 bits - 2^52) * 2^-53 * pi/2 lies in (-pi/4, pi/4).
FULLSHARD_INIT_FN void cos_sin_unit(uint64_t bits, double* c, double* s) {
  using namespace detail;
  const uint64_t q = bits >> 62;
  const int64_t f =
      static_cast<int64_t>(((bits >> 10) & 0x000fffffffffffffull) * 2 + 1) - (int64_t{1} << 52);
  const double y =
      dmul(dmul(exact_double(f), 0x1p-53), 0x1.921fb54442d18p+0);  // exact, then * pi/2
  // sin y = y + y w (-1/3! + w/5! - ... - w^6/15!), cos y = 1 + w (-1/2! + w/4! - ... + w^7/16!),
  // w = y^2 <= 0.617, by Estrin's scheme.
  const double w = dmul(y, y), w2 = dmul(w, w), w4 = dmul(w2, w2);
  const double s0 = axpb(0x1.1111111111111p-7, w, -0x1.5555555555555p-3);    // -1/3! + w/5!
  const double s1 = axpb(0x1.71de3a556c734p-19, w, -0x1.a01a01a01a01ap-13);  // -1/7! + w/9!
  const double s2 = axpb(0x1.6124613a86d09p-33, w, -0x1.ae64567f544e4p-26);  // -1/11! + w/13!
  const double ps =
      axpb(axpb(-0x1.ae7f3e733b81fp-41, w2, s2), w4, axpb(s1, w2, s0));  // ... - w^6/15!
  const double sn = dadd(y, dmul(dmul(y, w), ps));
  const double c0 = axpb(0x1.5555555555555p-5, w, -0.5);                     // -1/2! + w/4!
  const double c1 = axpb(0x1.a01a01a01a01ap-16, w, -0x1.6c16c16c16c17p-10);  // -1/6! + w/8!
  const double c2 = axpb(0x1.1eed8eff8d898p-29, w, -0x1.27e4fb7789f5cp-22);  // -1/10! + w/12!
  const double c3 = axpb(0x1.ae7f3e733b81fp-45, w, -0x1.93974a8c07c9dp-37);  // -1/14! + w/16!
  const double pc = axpb(axpb(c3, w2, c2), w4, axpb(c1, w2, c0));
  const double cs = dadd(1.0, dmul(w, pc));
  // The quadrant: q = 0 (cos, sin), 1 (-sin, cos), 2 (-cos, -sin), 3 (sin, -cos), as integer
  // selects and sign flips (no branch).
  const uint64_t swap = 0 - (q & 1), cb = bits_of(cs), sb = bits_of(sn);
  *c = double_of(((cb & ~swap) | (sb & swap)) ^ (((q ^ (q >> 1)) & 1) << 63));
  *s = double_of(((sb & ~swap) | (cb & swap)) ^ ((q >> 1) << 63));
}

// The stream of a parameter's generator: counter c draws splitmix64(stream + c * golden).
FULLSHARD_INIT_FN uint64_t stream_of(uint64_t key) { return splitmix64(key); }
FULLSHARD_INIT_FN uint64_t draw(uint64_t stream, uint64_t counter) {
  return splitmix64(stream + counter * 0x9e3779b97f4a7c15ull);
}

// Standard normals of elements 2p and 2p+1: (r cos t, r sin t) from counters 2p and 2p+1.
struct NormalPair {
  double even, odd;
};
FULLSHARD_INIT_FN NormalPair normal_pair(uint64_t stream, uint64_t p) {
  using namespace detail;
  const uint64_t a = draw(stream, 2 * p), b = draw(stream, 2 * p + 1);
  const double r = dsqrt(dmul(-2.0, log_unit((a >> 11) | 1)));
  double c, s;
  cos_sin_unit(b, &c, &s);
  return {dmul(r, c), dmul(r, s)};
}

// A draw scaled by std and rounded once to float.
FULLSHARD_INIT_FN float scaled(double std, double z) {
  return detail::to_float(detail::dmul(std, z));
}

// kUniform's draw for counter g: an odd multiple of 2^-53 in (-1, 1), exact (the top 53 bits
// of one SplitMix64 output, 2n + 1 - 2^53 scaled); `std` is then the bound (a LoRA A matrix).
FULLSHARD_INIT_FN double uniform_unit(uint64_t stream, uint64_t g) {
  using namespace detail;
  const int64_t n = static_cast<int64_t>(draw(stream, g) >> 11);
  return dmul(exact_double(2 * n + 1 - (int64_t{1} << 53)), 0x1p-53);
}

// Element g of a parameter (kind: kNormal, kOnes, kZeros, kUniform).
FULLSHARD_INIT_FN float element(int kind, double std, uint64_t stream, uint64_t g) {
  if (kind == kOnes) return 1.0f;
  if (kind == kUniform) return scaled(std, uniform_unit(stream, g));
  if (kind != kNormal) return 0.0f;
  const NormalPair p = normal_pair(stream, g >> 1);
  return scaled(std, (g & 1) ? p.odd : p.even);
}

// Where a shard's elements sit in the full parameter (NOTE [Sharding-independent init] in
// core/model/module.h): local row l of this shard is row row_offset + l of the tp-local
// tensor, which is global row (l' / block) * block * tp + tp_index * block + l' % block for
// GPT-2's stacked blocks (block > 0) and l' otherwise; its row_numel columns start at column
// col_offset of a global row of row_stride elements (a Shard(1) block), else the row is whole.
struct InitSpec {
  int kind = kZeros;
  double std = 0;
  uint64_t stream = 0;  // stream_of(the parameter's init key)
  int64_t numel = 0;    // the padded shard's elements (rows past local_rows are 0)
  int64_t row_offset = 0, local_rows = 0, row_numel = 1;
  int64_t row_stride = 1, col_offset = 0;
  int64_t block = 0, tp_index = 0, tp = 1;

  FULLSHARD_HOST_DEVICE int64_t real() const { return local_rows * row_numel; }
  // Whether local elements are consecutive elements of the full tensor.
  FULLSHARD_HOST_DEVICE bool contiguous() const { return block == 0 && row_stride == row_numel; }
  // The full tensor's flat index of local element (row r, column c).
  FULLSHARD_HOST_DEVICE uint64_t global_index(int64_t r, int64_t c) const {
    const int64_t l = row_offset + r;
    const int64_t g = block > 0 ? (l / block) * block * tp + tp_index * block + l % block : l;
    return static_cast<uint64_t>(g * row_stride + col_offset + c);
  }
};

}  // namespace fullshard::init_gen
