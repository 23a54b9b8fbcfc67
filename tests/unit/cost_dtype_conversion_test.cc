// Converting kernels (NOTE [Converting kernels] in simulator/cost/dtype_conversion.h): which
// ops convert, decided from their tensors' dtypes and element counts, and what the compute model
// charges for them against a same-dtype kernel of the same bytes.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/compute_model.h"
#include "simulator/cost/dtype_conversion.h"

namespace fullshard::sim {
namespace {

TensorRef tensor(DType d, Shape shape) {
  TensorRef t;
  t.meta.dtype = d;
  t.meta.shape = std::move(shape);
  return t;
}

constexpr DType kBf16 = DType::kBFloat16, kFp32 = DType::kFloat32, kFp16 = DType::kFloat16;

TEST(ConvertsDtype, WideningAndMixedReadsConvertNarrowingCopiesDoNot) {
  const Shape x{8192, 4096};
  // x.float() / x.to(torch.float32): bf16 -> fp32, the measured slow cast.
  EXPECT_TRUE(converts_dtype({tensor(kBf16, x)}, {tensor(kFp32, x)}));
  EXPECT_TRUE(converts_dtype({tensor(kFp16, x)}, {tensor(kFp32, x)}));
  // type_as / the FSDP2 copy-in cast: fp32 -> bf16 has its own vectorised kernel.
  EXPECT_FALSE(converts_dtype({tensor(kFp32, x)}, {tensor(kBf16, x)}));
  // Same dtype: adds, copies, SiLU.
  EXPECT_FALSE(converts_dtype({tensor(kBf16, x), tensor(kBf16, x)}, {tensor(kBf16, x)}));
  EXPECT_FALSE(converts_dtype({tensor(kFp32, x)}, {tensor(kFp32, x)}));
  // fp32 x bf16 -> fp32 (type promotion), and an in-place bf16 += fp32: mixed reads.
  EXPECT_TRUE(converts_dtype({tensor(kFp32, x), tensor(kBf16, x)}, {tensor(kFp32, x)}));
  EXPECT_TRUE(converts_dtype({tensor(kBf16, x), tensor(kFp32, x)}, {tensor(kBf16, x)}));
}

TEST(ConvertsDtype, OnlyTheElementStreamCounts) {
  // A reduction's small fp32 result (a squared norm, a sum) is not a cast of its input.
  EXPECT_FALSE(converts_dtype({tensor(kBf16, {1 << 20})}, {tensor(kFp32, {1})}));
  // A fused norm: y in x's dtype, the fp32 rstd per row; a broadcast weight of another dtype.
  EXPECT_FALSE(converts_dtype({tensor(kBf16, {64, 128}), tensor(kFp32, {128})},
                              {tensor(kBf16, {64, 128}), tensor(kFp32, {64})}));
  // An embedding: int64 ids, bf16 table rows -> bf16 activations.
  EXPECT_FALSE(converts_dtype({tensor(kBf16, {1000, 64}), tensor(DType::kInt64, {16})},
                              {tensor(kBf16, {16, 64})}));
  // Integer tensors never count; no floating output, no conversion.
  EXPECT_FALSE(converts_dtype({tensor(DType::kInt64, {16})}, {tensor(kFp32, {16})}));
  EXPECT_FALSE(converts_dtype({tensor(kBf16, {16})}, {}));
}

// As NOTE [Converting kernels] (simulator/cost/dtype_conversion.h): at equal bytes, a converting
// elementwise kernel's memory time is the same-dtype kernel's divided by convert_memory_factor;
// GEMMs, norms and profiles without the figure (factor 1) price as before.
RC_GTEST_PROP(ConvertingKernels, CostTheModelledRatioMoreThanSameDtypeOnes, ()) {
  HardwareProfile p = load_hardware_profile("h200-141gb-measured");
  RC_ASSERT(p.convert_memory_factor < 1.0);  // fitted from the 2026-11-28 casts
  if (*rc::gen::arbitrary<bool>()) p.convert_memory_factor = *rc::gen::inRange(1, 1001) / 1000.0;
  const double bytes = *rc::gen::inRange(1, 1 << 30) * 4.0;
  const ComputeModel m(p, {});
  Instr same;
  same.type = InstrType::kKernel;
  same.op = *rc::gen::element(OpKind::kCopy, OpKind::kAdd, OpKind::kMul, OpKind::kMulBroadcast);
  same.dtype = kBf16;
  same.bytes = bytes;
  Instr convert = same;
  convert.converts_dtype = true;
  const double gap = p.kernel_gap_s;
  const double ratio = (m.device_seconds(convert) - gap) / (m.device_seconds(same) - gap);
  RC_ASSERT(std::abs(ratio * p.convert_memory_factor - 1) < 1e-9);
  RC_ASSERT(m.memory_efficiency(convert) == m.memory_efficiency(same) * p.convert_memory_factor);
  for (OpKind k : {OpKind::kLinear, OpKind::kRMSNorm, OpKind::kRMSNormBackward}) {
    Instr a = same, b = same;
    a.op = b.op = k;
    a.flops = b.flops = 1e6;
    a.dims = b.dims = {64, 64, 64};
    b.converts_dtype = true;
    RC_ASSERT(m.device_seconds(a) == m.device_seconds(b));
  }
  const ComputeModel stock(load_hardware_profile("h200"), {});
  RC_ASSERT(stock.device_seconds(convert) == stock.device_seconds(same));
}

}  // namespace
}  // namespace fullshard::sim
