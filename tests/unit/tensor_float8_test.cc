// NOTE [Float8 conversion rules] (core/tensor/float8.h): every cast against torch 2.11's own
// (tests/data/oracle/float8_casts.bin, written by tools/oracle/float8_casts.py).
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor/float8.h"

namespace fullshard {
namespace {

struct Record {
  uint32_t bits;
  uint8_t e4m3fn, e5m2, e4m3fn_sat, e5m2_sat;
};

struct Oracle {
  std::vector<Record> records;
  std::vector<uint32_t> decode_e4m3fn, decode_e5m2;
};

Oracle load() {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/oracle/float8_casts.bin",
                   std::ios::binary);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  Oracle o;
  if (bytes.size() < 12 || std::string(bytes.data(), 8) != "FP8CAST1") return o;
  uint32_t n = 0;
  std::memcpy(&n, bytes.data() + 8, 4);
  if (bytes.size() != 12 + size_t{n} * 8 + 2 * 256 * 4) return o;
  const char* p = bytes.data() + 12;
  for (uint32_t i = 0; i < n; ++i, p += 8) {
    Record r;
    std::memcpy(&r.bits, p, 4);
    r.e4m3fn = static_cast<uint8_t>(p[4]);
    r.e5m2 = static_cast<uint8_t>(p[5]);
    r.e4m3fn_sat = static_cast<uint8_t>(p[6]);
    r.e5m2_sat = static_cast<uint8_t>(p[7]);
    o.records.push_back(r);
  }
  o.decode_e4m3fn.resize(256);
  o.decode_e5m2.resize(256);
  std::memcpy(o.decode_e4m3fn.data(), p, 1024);
  std::memcpy(o.decode_e5m2.data(), p + 1024, 1024);
  return o;
}

const Oracle& oracle() {
  static const Oracle o = load();
  return o;
}

// NaN compares by being NaN with the same sign (torch keeps the sign; the payload is the
// default quiet NaN on both sides, but that is not a contract).
bool same_float(float a, uint32_t b_bits) {
  const float b = std::bit_cast<float>(b_bits);
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return std::bit_cast<uint32_t>(a) == b_bits;
}

TEST(Float8, TheReferenceFileHoldsTheInputsItSays) {
  const Oracle& o = oracle();
  ASSERT_GT(o.records.size(), 20000u) << "tests/data/oracle/float8_casts.bin missing or damaged";
  // Group 1 first: bf16 values with exponent field 97..150, both signs, then the specials.
  size_t i = 0;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exp = 97; exp <= 150; ++exp)
      for (uint32_t mant = 0; mant < 128; ++mant, ++i)
        ASSERT_EQ(o.records[i].bits, ((sign << 15) | (exp << 7) | mant) << 16) << i;
  for (uint32_t special : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u})
    ASSERT_EQ(o.records[i++].bits, special);
}

TEST(Float8, EveryCastMatchesTorchBitForBit) {
  int wrong[4] = {0, 0, 0, 0};
  for (const Record& r : oracle().records) {
    const float x = std::bit_cast<float>(r.bits);
    const uint8_t got[4] = {float_to_e4m3fn(x), float_to_e5m2(x), float_to_e4m3fn(x, true),
                            float_to_e5m2(x, true)};
    const uint8_t want[4] = {r.e4m3fn, r.e5m2, r.e4m3fn_sat, r.e5m2_sat};
    for (int k = 0; k < 4; ++k)
      if (got[k] != want[k] && ++wrong[k] <= 5)
        ADD_FAILURE() << "cast " << k << " of " << x << " (0x" << std::hex << r.bits << "): got 0x"
                      << int(got[k]) << ", torch 0x" << int(want[k]);
  }
  for (int k = 0; k < 4; ++k) EXPECT_EQ(wrong[k], 0) << "cast " << k;
}

TEST(Float8, EveryCodeDecodesAsTorch) {
  const Oracle& o = oracle();
  ASSERT_EQ(o.decode_e4m3fn.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    EXPECT_TRUE(same_float(e4m3fn_to_float(static_cast<uint8_t>(c)), o.decode_e4m3fn[c])) << c;
    EXPECT_TRUE(same_float(e5m2_to_float(static_cast<uint8_t>(c)), o.decode_e5m2[c])) << c;
  }
  EXPECT_EQ(e4m3fn_to_float(0x7E), 448.0f);
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(e4m3fn_to_float(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(e5m2_to_float(0x01), std::ldexp(1.0f, -16));
}

// Every finite code survives a round trip, and decoding then casting any code keeps it (NaN
// codes as NaN).
TEST(Float8, FiniteCodesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float a = e4m3fn_to_float(code), b = e5m2_to_float(code);
    if (!std::isnan(a)) {
      EXPECT_EQ(float_to_e4m3fn(a), code) << c;
    }
    if (!std::isnan(b)) {
      EXPECT_EQ(float_to_e5m2(b), code) << c;
    }
  }
}

}  // namespace
}  // namespace fullshard
