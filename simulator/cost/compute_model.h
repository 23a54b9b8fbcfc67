#pragma once
// What one kernel costs, from measured kernel efficiencies (NOTE [Measured kernel efficiencies]
// in core/scenario/hardware_profile.h; docs/cost-model.md, "Compute"): GEMMs by size and shape,
// flash attention by sequence length, head dim and direction, eager elementwise chains at their
// kernel counts and traffic, a device-side gap per kernel and host-side dispatch per launch;
// copies over the host link for CPU offload; CPU work on the host's cores. Every coefficient is
// a hardware-profile figure. Pure: no state besides the profile.
#include "core/runtime/op.h"
#include "core/scenario/hardware_profile.h"
#include "core/tensor/dtype.h"
#include "simulator/cost/collective_matmul.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// Which peak and efficiency model a kernel's FLOPs use.
enum class OpClass : uint8_t {
  kMatmul,     // GEMMs on tensor cores (linear forward / backward)
  kAttention,  // fused (flash) attention on tensor cores
  kVector,     // everything else: elementwise, norms, softmax, optimizer, copies (CUDA cores)
};
OpClass op_class(OpKind k);

struct ComputeOptions {
  bool pinned_memory = true;  // fsdp.cpu_offload.pin_memory: H2D / D2H from page-locked memory
  int host_threads_per_rank = 1;
  double storage_write_bandwidth =
      2e9;  // bytes/s per node: training.checkpoint's (NOTE [Checkpoint storage bandwidth])
};

class ComputeModel {
 public:
  ComputeModel(const HardwareProfile& hw, ComputeOptions options);

  // Peak FLOP/s of a class at a dtype: tensor-core rates for bf16 / fp16 matmuls and attention;
  // fp32 matmuls run on CUDA cores (PyTorch's default torch.backends.cuda.matmul.allow_tf32 is
  // False), as do vector ops.
  double peak_flops(OpClass c, DType dtype) const;
  // NOTE [GEMM shape] (compute_model.cc): d / (d + matmul_small_dim) for each of M, N, K (1 when
  // dims are unknown).
  double matmul_shape_factor(const std::array<int64_t, 3>& dims) const;
  // Fraction of peak a kernel's FLOPs reach: matmul_efficiency(flops) x shape factor; attention
  // by (backward) table at its sequence length x head-dim factor; vector_efficiency(flops). Each
  // times sustained_clock_ratio for tensor-core work.
  double compute_efficiency(const Instr& kernel) const;
  // A device kernel: max(flops / (peak x efficiency), bytes / (hbm_bandwidth x
  // memory_efficiency(kernel))) + kernels x kernel_gap_s; on a GPU a norm backward is two
  // kernels (NOTE [Fused norm kernels]).
  double device_seconds(const Instr& kernel) const;
  // The fraction of hbm_bandwidth a device kernel's bytes move at: norm_memory_efficiency for a
  // norm on a GPU; else memory_efficiency(bytes / kernels), x convert_memory_factor for an
  // elementwise kernel that converts dtypes (NOTE [Converting kernels]).
  double memory_efficiency(const Instr& kernel) const;
  // An async-TP collective-matmul (kAllGatherMatmul / kMatmulReduceScatter): its pipeline played
  // over the pieces' costs (NOTE [Collective-matmul pipeline]); device_seconds is its total_s.
  CollectiveMatmulTimes collective_matmul(const Instr& kernel) const;
  // bytes over the host link at the pinned or pageable copy bandwidth.
  double copy_seconds(double transfer_bytes) const;
  // bytes into pageable host memory (a checkpoint's staging): the pageable copy bandwidth.
  double pageable_copy_seconds(double transfer_bytes) const;
  // A checkpoint write (InstrType::kStorageWrite): its node's bytes at storage_write_bandwidth.
  double storage_write_seconds(const Instr& write) const;
  // CPU work on host_threads_per_rank cores (at most the rank's share of the node's cores):
  // max(flops / (threads x host_core_flops), bytes / min(threads x host_core_memory_bandwidth,
  // host_memory_bandwidth / gpus_per_node)).
  double host_seconds(double flops, double bytes) const;
  // Dispatches on Instr::place (a kernel instruction).
  double kernel_seconds(const Instr& kernel) const;
  // Host seconds to issue a kernel: (eager_dispatch_s + launch_overhead_s) per CUDA kernel
  // eager PyTorch launches for it.
  double launch_seconds(const Instr& kernel) const;
  // CUDA kernels PyTorch launches for a recorded kernel (NOTE [Fused norm kernels]).
  int eager_kernel_count(const Instr& kernel) const;

  const HardwareProfile& hardware() const { return hw_; }

 private:
  HardwareProfile hw_;
  ComputeOptions options_;
};

}  // namespace fullshard::sim
