// Compute cost (simulator/cost/compute_model.h): roofline with the profile's efficiency step
// tables, dtype-dependent peaks, pinned / pageable copies and CPU work, against hand values.
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

TEST(ComputeModel, RooflineWithEfficiencySteps) {
  const ComputeModel m(h100(), {});
  // Llama 8B's w1 forward (8192 tokens x 4096 x 14336): 962 GFLOP at 0.95 of 989.4 TF.
  const double big = 2.0 * 8192 * 4096 * 14336;
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kLinear, DType::kBFloat16, big, 1e8), big / (989.4e12 * 0.95));
  // 0.5 GFLOP: below the 1 GFLOP step, 0.1 efficiency; 20 GFLOP: 0.9.
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kLinear, DType::kBFloat16, 0.5e9, 0), 0.5e9 / (989.4e12 * 0.1));
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kLinear, DType::kBFloat16, 20e9, 0), 20e9 / (989.4e12 * 0.9));
  // fp32 matmuls run on CUDA cores; fp16 on tensor cores.
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kLinear, DType::kFloat32, big, 0), big / (66.9e12 * 0.95));
  EXPECT_DOUBLE_EQ(m.peak_flops(OpClass::kMatmul, DType::kFloat16), 989.4e12);
  // Attention at 0.35 of the tensor-core peak.
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kAttention, DType::kBFloat16, 1e12, 1e6), 1e12 / (989.4e12 * 0.35));
  // A norm is memory-bound: 200 MB at 0.9 x 3.35 TB/s beats 0.1 GFLOP at 0.1 x 66.9 TF.
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kRMSNorm, DType::kBFloat16, 1e8, 200e6), 200e6 / (3.35e12 * 0.9));
  // 5 MB: the 1 MB step (0.6).
  EXPECT_DOUBLE_EQ(m.device_seconds(OpKind::kCopy, DType::kBFloat16, 0, 5e6), 5e6 / (3.35e12 * 0.6));
  EXPECT_EQ(m.device_seconds(OpKind::kFill, DType::kFloat32, 0, 0), 0);
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
  EXPECT_DOUBLE_EQ(pinned.kernel_seconds(adam), 12e9 / (3.35e12 * 0.9));
}

RC_GTEST_PROP(ComputeModelProps, MoreWorkNeverTakesLessTimeWithinAStep, ()) {
  // Within one efficiency step time grows with FLOPs and bytes; across a step it may fall
  // (a bigger GEMM runs more efficiently), as in Calculon.
  const ComputeModel m(h100(), {});
  const double flops = *rc::gen::inRange(1, 1000) * 1e6;
  const double bytes = *rc::gen::inRange(1, 1000) * 1e3;
  const double more = 1 + *rc::gen::inRange(0, 100) / 1000.0;
  const OpKind k = *rc::gen::element(OpKind::kLinear, OpKind::kRMSNorm, OpKind::kAttention);
  RC_ASSERT(m.device_seconds(k, DType::kBFloat16, flops, bytes) <=
            m.device_seconds(k, DType::kBFloat16, flops * more, bytes * more));
}

}  // namespace
}  // namespace fullshard::sim
