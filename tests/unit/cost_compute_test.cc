// Compute cost (simulator/cost/compute_model.h): measured efficiencies by GEMM shape, attention
// sequence length / head dim / direction, eager kernel chains, dtype-dependent peaks, pinned /
// pageable copies and CPU work, against hand values.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/compute_model.h"

namespace fullshard::sim {
namespace {

const HardwareProfile& h100() {
  static const HardwareProfile p = load_hardware_profile("h100-sxm-80gb");
  return p;
}

TEST(ComputeModel, OpClasses) {
  EXPECT_EQ(op_class(OpKind::kLinear), OpClass::kMatmul);
  EXPECT_EQ(op_class(OpKind::kLinearBackwardWeight), OpClass::kMatmul);
  EXPECT_EQ(op_class(OpKind::kAttentionBackward), OpClass::kAttention);
  EXPECT_EQ(op_class(OpKind::kRMSNorm), OpClass::kVector);
  EXPECT_EQ(op_class(OpKind::kAdamW), OpClass::kVector);
}

Instr kernel(OpKind op, DType dtype, double flops, double bytes, std::array<int64_t, 3> dims = {}) {
  Instr k;
  k.type = InstrType::kKernel;
  k.op = op;
  k.dtype = dtype;
  k.flops = flops;
  k.bytes = bytes;
  k.dims = dims;
  return k;
}

TEST(ComputeModel, MeasuredEfficienciesByShape) {
  const ComputeModel m(h100(), {});
  const HardwareProfile& p = h100();
  const double clock = p.sustained_clock_ratio, gap = p.kernel_gap_s;
  EXPECT_DOUBLE_EQ(clock, 0.85);
  EXPECT_DOUBLE_EQ(p.matmul_small_dim, 64);
  // Llama 8B's w1 forward (8192 tokens x 4096 -> 14336): 962 GFLOP at 0.83 x shape x clock.
  const double big = 2.0 * 8192 * 4096 * 14336;
  const double shape = 8192.0 / 8256 * 4096.0 / 4160 * 14336.0 / 14400;
  EXPECT_DOUBLE_EQ(m.matmul_shape_factor({8192, 4096, 14336}), shape);
  EXPECT_DOUBLE_EQ(
      m.device_seconds(kernel(OpKind::kLinear, DType::kBFloat16, big, 1e8, {8192, 4096, 14336})),
      big / (989.4e12 * 0.83 * shape * clock) + gap);
  // A skinny product (M = 64) reaches half as much per small dimension.
  const double skinny = 2.0 * 64 * 4096 * 4096;
  EXPECT_LT(
      m.compute_efficiency(kernel(OpKind::kLinear, DType::kBFloat16, skinny, 0, {64, 4096, 4096})),
      0.51 * m.compute_efficiency(
                 kernel(OpKind::kLinear, DType::kBFloat16, skinny, 0, {8192, 4096, 4096})));
  // The three layouts of one linear share M, K, N and are priced alike.
  EXPECT_DOUBLE_EQ(
      m.device_seconds(
          kernel(OpKind::kLinearBackwardWeight, DType::kBFloat16, big, 0, {8192, 4096, 14336})),
      m.device_seconds(kernel(OpKind::kLinear, DType::kBFloat16, big, 0, {8192, 4096, 14336})));
  // fp32 matmuls run on CUDA cores; fp16 on tensor cores.
  EXPECT_DOUBLE_EQ(m.peak_flops(OpClass::kMatmul, DType::kFloat32), 66.9e12);
  EXPECT_DOUBLE_EQ(m.peak_flops(OpClass::kMatmul, DType::kFloat16), 989.4e12);
  // Causal flash attention, head dim 128, seq 8192: forward 0.337, backward 0.290 of peak.
  const auto fwd = kernel(OpKind::kAttention, DType::kBFloat16, 1e12, 1e6, {32, 8192, 128});
  const auto bwd = kernel(OpKind::kAttentionBackward, DType::kBFloat16, 1e12, 1e6, {32, 8192, 128});
  EXPECT_DOUBLE_EQ(m.device_seconds(fwd), 1e12 / (989.4e12 * 0.337 * clock) + gap);
  EXPECT_DOUBLE_EQ(m.device_seconds(bwd), 1e12 / (989.4e12 * 0.290 * clock) + gap);
  // Shorter sequences and other head dims reach less.
  EXPECT_LT(
      m.compute_efficiency(kernel(OpKind::kAttention, DType::kBFloat16, 1e12, 0, {32, 512, 128})),
      m.compute_efficiency(fwd));
  EXPECT_DOUBLE_EQ(
      m.compute_efficiency(kernel(OpKind::kAttention, DType::kBFloat16, 1e12, 0, {32, 8192, 64})),
      0.337 * 0.87 * clock);
  // An add is memory-bound: 200 MB at 0.9 x 3.35 TB/s, plus one kernel gap.
  EXPECT_DOUBLE_EQ(m.device_seconds(kernel(OpKind::kAdd, DType::kBFloat16, 1e8, 200e6)),
                   200e6 / (3.35e12 * 0.9) + gap);
  // Fused norms (NOTE [Fused norm kernels]): the forward one kernel, the backward two (dx and
  // the dweight partials' reduction), their bytes at the profile's measured 0.4 of HBM
  // bandwidth, whatever their size; fullshard's fused RoPE is one kernel at the roofline.
  EXPECT_DOUBLE_EQ(p.norm_memory_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(m.device_seconds(kernel(OpKind::kRMSNorm, DType::kBFloat16, 1e8, 200e6)),
                   200e6 / (3.35e12 * 0.4) + gap);
  EXPECT_DOUBLE_EQ(m.device_seconds(kernel(OpKind::kRMSNormBackward, DType::kBFloat16, 1e3, 3e5)),
                   3e5 / (3.35e12 * 0.4) + 2 * gap);
  EXPECT_DOUBLE_EQ(m.device_seconds(kernel(OpKind::kLayerNorm, DType::kBFloat16, 1e8, 200e6)),
                   200e6 / (3.35e12 * 0.4) + gap);
  EXPECT_EQ(m.eager_kernel_count(kernel(OpKind::kRMSNorm, DType::kBFloat16, 1, 1)), 1);
  EXPECT_EQ(m.eager_kernel_count(kernel(OpKind::kLayerNormBackward, DType::kBFloat16, 1, 1)), 2);
  EXPECT_DOUBLE_EQ(m.launch_seconds(kernel(OpKind::kRMSNormBackward, DType::kBFloat16, 1, 1)),
                   2 * (p.eager_dispatch_s + p.launch_overhead_s));
  EXPECT_DOUBLE_EQ(m.device_seconds(kernel(OpKind::kRoPE, DType::kBFloat16, 1e6, 200e6)),
                   200e6 / (3.35e12 * 0.9) + gap);
  // 5 MB copy: the 1 MB step (0.6).
  EXPECT_DOUBLE_EQ(m.device_seconds(kernel(OpKind::kCopy, DType::kBFloat16, 0, 5e6)),
                   5e6 / (3.35e12 * 0.6) + gap);
  EXPECT_EQ(m.device_seconds(kernel(OpKind::kFill, DType::kFloat32, 0, 0)), gap);
}

TEST(ComputeModel, CpuBackendRunsFusedKernelsWithoutGapsOrDispatch) {
  const ComputeModel m(load_hardware_profile("cpu"), {});
  EXPECT_EQ(m.eager_kernel_count(kernel(OpKind::kRMSNorm, DType::kFloat32, 1, 1)), 1);
  EXPECT_EQ(m.launch_seconds(kernel(OpKind::kRMSNorm, DType::kFloat32, 1, 1)),
            m.hardware().launch_overhead_s);
}

TEST(ComputeModel, PowerCapScalesTensorCoreWorkOnly) {
  HardwareProfile capped = h100();
  capped.sustained_clock_ratio = 0.5;
  const ComputeModel a(h100(), {}), b(capped, {});
  const auto mm = kernel(OpKind::kLinear, DType::kBFloat16, 1e12, 0, {8192, 8192, 8192});
  EXPECT_DOUBLE_EQ(b.compute_efficiency(mm), a.compute_efficiency(mm) * 0.5 / 0.85);
  const auto add = kernel(OpKind::kAdd, DType::kBFloat16, 1e6, 1e9);
  EXPECT_DOUBLE_EQ(b.device_seconds(add), a.device_seconds(add));
}

TEST(ComputeModel, CopiesAndHostWork) {
  const ComputeModel pinned(h100(), {true, 1});
  const ComputeModel pageable(h100(), {false, 1});
  EXPECT_DOUBLE_EQ(pinned.copy_seconds(54e9), 1.0);
  EXPECT_DOUBLE_EQ(pageable.copy_seconds(27e9), 1.0);
  Instr h2d;
  h2d.type = InstrType::kKernel;
  h2d.op = OpKind::kCopy;
  h2d.place = KernelPlace::kHostToDevice;
  h2d.bytes = 2 * 54e9;  // read + written: 54 GB cross the link
  EXPECT_DOUBLE_EQ(pinned.kernel_seconds(h2d), 1.0);
  // AdamW on the host, one thread: 12 GB/s of one core bounds 12e9 bytes; FLOPs are cheaper.
  EXPECT_DOUBLE_EQ(pinned.host_seconds(1e9, 12e9), 1.0);
  // 32 threads are capped at the rank's 112 / 8 = 14 cores, whose 168 GB/s exceed the rank's
  // share of the node's memory bandwidth (614.4 / 8 = 76.8 GB/s).
  const ComputeModel many(h100(), {true, 32});
  EXPECT_DOUBLE_EQ(many.host_seconds(0, 76.8e9), 1.0);
  EXPECT_DOUBLE_EQ(many.host_seconds(14 * 128e9, 0), 1.0);
  Instr adam;
  adam.type = InstrType::kKernel;
  adam.op = OpKind::kAdamW;
  adam.place = KernelPlace::kHost;
  adam.flops = 1e9;
  adam.bytes = 12e9;
  EXPECT_DOUBLE_EQ(pinned.kernel_seconds(adam), 1.0);
  adam.place = KernelPlace::kDevice;
  EXPECT_DOUBLE_EQ(pinned.kernel_seconds(adam), 12e9 / (3.35e12 * 0.9) + h100().kernel_gap_s);
}

RC_GTEST_PROP(ComputeModelProps, MoreWorkNeverTakesLessTimeWithinAStep, ()) {
  // Within one efficiency step time grows with FLOPs and bytes; across a step it may fall
  // (a bigger GEMM runs more efficiently), as in Calculon.
  const ComputeModel m(h100(), {});
  const double flops = *rc::gen::inRange(1, 1000) * 1e6;
  const double bytes = *rc::gen::inRange(1, 1000) * 1e3;
  const double more = 1 + *rc::gen::inRange(0, 100) / 1000.0;
  const OpKind k = *rc::gen::element(OpKind::kLinear, OpKind::kRMSNorm, OpKind::kAttention);
  const std::array<int64_t, 3> dims = {4096, 4096, 4096};
  RC_ASSERT(m.device_seconds(kernel(k, DType::kBFloat16, flops, bytes, dims)) <=
            m.device_seconds(kernel(k, DType::kBFloat16, flops * more, bytes * more, dims)));
}

}  // namespace
}  // namespace fullshard::sim
