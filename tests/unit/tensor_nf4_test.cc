// QLoRA's NF4 (core/tensor/nf4.h, NOTE [NF4]): the level table, the parts' sizes, and
// quantisation / dequantisation bit for bit against values worked out by hand from torchao's
// algorithm (nf4_tensor.py at pytorch/ao@36027d8), each bf16 op rounded to nearest even.
#include <gtest/gtest.h>

#include <vector>

#include "core/tensor/float_convert.h"
#include "core/tensor/nf4.h"

namespace fullshard {
namespace {

TEST(Nf4, TableIsTorchaosLevelsInBf16) {
  // torch.tensor([-1.0000, -0.6962, ..., 1.0000], dtype=torch.bfloat16): e.g. -0.6962 ->
  // 0xBF32 (-0.6953125), 0.0796 -> 0x3DA3 (0.07958984375), 0.5626 -> 0x3F10 (0.5625).
  const std::array<uint16_t, 16> want = {0xBF80, 0xBF32, 0xBF06, 0xBECA, 0xBE92, 0xBE3D,
                                         0xBDBB, 0x0000, 0x3DA3, 0x3E25, 0x3E7C, 0x3EAD,
                                         0x3EE2, 0x3F10, 0x3F39, 0x3F80};
  EXPECT_EQ(nf4_table_bf16(), want);
}

TEST(Nf4, PartSizesOfALlama8bProjection) {
  // A 4096 x 4096 weight at torchao's defaults: 4-bit codes, an int8 per 64 elements, a bf16
  // factor per 64 * 256 elements.
  const Nf4Layout l{4096 * 4096, 64, 256};
  ASSERT_TRUE(l.valid());
  EXPECT_EQ(l.data_bytes(), 8388608u);
  EXPECT_EQ(l.scalers_bytes(), 262144u);
  EXPECT_EQ(l.factors_bytes(), 2048u);
  EXPECT_FALSE((Nf4Layout{4096 * 4095, 64, 256}.valid()));  // 16773120 % 16384 != 0
  EXPECT_FALSE((Nf4Layout{64, 3, 1}.valid()));              // odd block: codes pair up
}

// 16 elements, block_size 4, scaler_block_size 2: blocks' absmax 1, 2, 0.0400390625 (0x3D24),
// 3; mean bf16(6.0400390625 / 4) = 1.5078125; centred -0.5078125, 0.4921875, -1.46875 (bf16 of
// -1.4677734375), 1.4921875; factor 0: reciprocal(2 * 0.5078125) = bf16(0.98462) = 0.984375,
// * 256 = 252; factor 1: reciprocal(2 * 1.4921875) = bf16(0.33508) = 0.3359375, * 256 = 86;
// scalers round(bf16(-0.5078125 * 252) = -128) = -128, round(bf16(124.03125) = 124) = 124,
// round(bf16(-126.3125) = -126.5) = -126 (half to even), round(bf16(128.328125) = 128) ->
// clamp 127.
// Element 0: 0.5 / 1 = 0.5, nearest level 0.44140625 (code 12, |diff| 0.0586 < 0.0625).
const std::vector<uint16_t> kX = {0x3F00, 0xBE80, 0x3E00, 0x3F80, 0xC000, 0x3F40, 0x3E9A, 0xBD80,
                                  0x3C24, 0xBCA4, 0x3CF6, 0x3D24, 0x4040, 0xBFC0, 0x3F1A, 0x4010};

TEST(Nf4, QuantizesAsTorchaoBitForBit) {
  const Nf4Layout l{16, 4, 2};
  const Nf4Quantized q = nf4_quantize(kX.data(), l);
  // codes 12 4 | 9 15 | 0 11 | 9 7 | 10 2 | 14 15 | 15 2 | 9 14
  EXPECT_EQ(q.data, (std::vector<uint8_t>{0xC4, 0x9F, 0x0B, 0x97, 0xA2, 0xEF, 0xF2, 0x9E}));
  EXPECT_EQ(q.scalers, (std::vector<int8_t>{-128, 124, -126, 127}));
  EXPECT_EQ(q.factors, (std::vector<uint16_t>{0x437C, 0x42AC}));  // 252, 86
  EXPECT_EQ(q.scaler_mean, 0x3FC1);                               // 1.5078125
}

TEST(Nf4, DequantizesAsTorchaoBitForBit) {
  const Nf4Layout l{16, 4, 2};
  const Nf4Quantized q = nf4_quantize(kX.data(), l);
  std::vector<uint16_t> out(16);
  nf4_dequantize(q.data.data(), q.scalers.data(), q.factors.data(), q.scaler_mean,
                 nf4_table_bf16().data(), l, out.data());
  // Block 0's scaler: bf16(-128 / 252) = -0.5078125, + 1.5078125 = 1.0; element 0 = 0.44140625.
  // Block 1's: bf16(124 / 252) + 1.5078125 = bf16(0.4921875 + 1.5078125) = 2.0.
  const std::vector<uint16_t> want = {0x3EE2, 0xBE92, 0x3E25, 0x3F80, 0xC000, 0x3F2D,
                                      0x3EA5, 0x0000, 0x3C1E, 0xBCA8, 0x3CE7, 0x3D20,
                                      0x403F, 0xBFC8, 0x3EF6, 0x400A};
  EXPECT_EQ(out, want);
  EXPECT_EQ(bf16_to_float(out[0]), 0.44140625f);
  EXPECT_EQ(bf16_to_float(out[12]), 2.984375f);  // 3.0 comes back through the scalers as this
}

TEST(Nf4, ScalerBlocksDequantizeOnTheirOwn) {
  // A rank's chunk of whole scaler blocks dequantises alone as its part of the whole (what the
  // all-gather puts back together): the second half of the parts gives elements 8..15.
  const Nf4Layout l{16, 4, 2};
  const Nf4Quantized q = nf4_quantize(kX.data(), l);
  std::vector<uint16_t> whole(16), half(8);
  nf4_dequantize(q.data.data(), q.scalers.data(), q.factors.data(), q.scaler_mean,
                 nf4_table_bf16().data(), l, whole.data());
  nf4_dequantize(q.data.data() + 4, q.scalers.data() + 2, q.factors.data() + 1, q.scaler_mean,
                 nf4_table_bf16().data(), Nf4Layout{8, 4, 2}, half.data());
  EXPECT_EQ(half, std::vector<uint16_t>(whole.begin() + 8, whole.end()));
}

}  // namespace
}  // namespace fullshard
