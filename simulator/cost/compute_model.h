#pragma once
// What one kernel costs: a roofline per op with Calculon-style efficiency step tables,
// copies over the host link for CPU offload (pinned or pageable), and CPU work (the offloaded
// optimizer step) on the host's cores. Every coefficient is a hardware-profile figure
// (docs/cost-model.md, "Compute"). Pure: no state besides the profile.
#include "core/runtime/op.h"
#include "core/scenario/hardware_profile.h"
#include "core/tensor/dtype.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// Which peak and efficiency table a kernel's FLOPs use.
enum class OpClass : uint8_t {
  kMatmul,     // GEMMs on tensor cores (linear forward / backward)
  kAttention,  // fused (flash) attention on tensor cores
  kVector,     // everything else: elementwise, norms, softmax, optimizer, copies (CUDA cores)
};
OpClass op_class(OpKind k);

struct ComputeOptions {
  bool pinned_memory = true;    // fsdp.cpu_offload.pin_memory: H2D / D2H from page-locked memory
  int host_threads_per_rank = 1;
};

class ComputeModel {
 public:
  ComputeModel(const HardwareProfile& hw, ComputeOptions options);

  // Peak FLOP/s of a class at a dtype: tensor-core rates for bf16 / fp16 matmuls and attention;
  // fp32 matmuls run on CUDA cores (PyTorch's default torch.backends.cuda.matmul.allow_tf32 is
  // False), as do vector ops.
  double peak_flops(OpClass c, DType dtype) const;
  // max(flops / (peak x efficiency(flops)), bytes / (hbm_bandwidth x memory_efficiency(bytes))).
  double device_seconds(OpKind kind, DType dtype, double flops, double bytes) const;
  // bytes over the host link at the pinned or pageable copy bandwidth.
  double copy_seconds(double transfer_bytes) const;
  // CPU work on host_threads_per_rank cores (at most the rank's share of the node's cores):
  // max(flops / (threads x host_core_flops), bytes / min(threads x host_core_memory_bandwidth,
  // host_memory_bandwidth / gpus_per_node)).
  double host_seconds(double flops, double bytes) const;
  // Dispatches on Instr::place (a kernel instruction).
  double kernel_seconds(const Instr& kernel) const;

  const HardwareProfile& hardware() const { return hw_; }

 private:
  HardwareProfile hw_;
  ComputeOptions options_;
};

}  // namespace fullshard::sim
