#include "simulator/cost/compute_model.h"

#include <algorithm>

namespace fullshard::sim {

OpClass op_class(OpKind k) {
  switch (k) {
    case OpKind::kLinear:
    case OpKind::kLinearBackwardInput:
    case OpKind::kLinearBackwardWeight:
    case OpKind::kScaledMM:  // float8 (docs/float8.md): priced at peak_flops_fp8
    case OpKind::kScaledMMBackwardInput:
    case OpKind::kScaledMMBackwardWeight:
    case OpKind::kAllGatherMatmul:
    case OpKind::kMatmulReduceScatter:
    case OpKind::kGroupedMM:  // torch._grouped_mm: one GEMM per expert group (docs/moe.md)
    case OpKind::kGroupedMMBackwardInput:
    case OpKind::kGroupedMMBackwardWeight: return OpClass::kMatmul;
    case OpKind::kAttention:
    case OpKind::kAttentionBackward:
    case OpKind::kAttentionEfficient:
    case OpKind::kAttentionEfficientBackward:
    case OpKind::kAttentionCudnn:
    case OpKind::kAttentionCudnnBackward: return OpClass::kAttention;
    default: return OpClass::kVector;
  }
}

ComputeModel::ComputeModel(const HardwareProfile& hw, ComputeOptions options)
    : hw_(hw), options_(options) {}

double ComputeModel::peak_flops(OpClass c, DType dtype) const {
  if (c == OpClass::kVector) return hw_.peak_flops_fp32;
  switch (dtype) {
    case DType::kBFloat16: return hw_.peak_flops_bf16;
    case DType::kFloat16: return hw_.peak_flops_fp16;
    case DType::kFloat8E4M3FN:  // torch._scaled_mm's operands (kScaledMM*)
    case DType::kFloat8E5M2:    // a CPU profile emulates float8 in fp32 (no peak_flops_fp8)
      return hw_.peak_flops_fp8 > 0 ? hw_.peak_flops_fp8 : hw_.peak_flops_fp32;
    default: return hw_.peak_flops_fp32;
  }
}

// NOTE [GEMM shape]: a dimension d of a product fills the GPU's tiles in proportion to
// d / (d + d0): a dimension far above the tile width costs nothing, one of d0 elements halves
// the throughput (partly filled tiles, fewer blocks than SMs, a short K loop that cannot hide
// its prologue). The three products of a linear (forward, grad input, grad weight) share M, N
// and K and differ in which one is reduced; with no published measurement of the difference
// they are priced alike, and tools/measure times all three for `fullshard calibrate`.
double ComputeModel::matmul_shape_factor(const std::array<int64_t, 3>& dims) const {
  const double d0 = hw_.matmul_small_dim;
  if (d0 <= 0) return 1.0;
  double f = 1.0;
  for (int64_t d : dims)
    if (d > 0) f *= static_cast<double>(d) / (static_cast<double>(d) + d0);
  return f;
}

double ComputeModel::compute_efficiency(const Instr& k) const {
  switch (op_class(k.op)) {
    case OpClass::kMatmul:
      return hw_.matmul_efficiency.at(k.flops) * matmul_shape_factor(k.dims) *
             hw_.sustained_clock_ratio;
    case OpClass::kAttention: {
      // NOTE [Attention backends' cost]: the efficient and cuDNN kernels are priced with the
      // profile's (flash-attention) tables: no profile has measured figures for them yet
      // (docs/cost-model.md, Limits); their saved tensors and scratch differ exactly.
      const bool backward = k.op == OpKind::kAttentionBackward ||
                            k.op == OpKind::kAttentionEfficientBackward ||
                            k.op == OpKind::kAttentionCudnnBackward;
      const EfficiencyTable& t =
          backward ? hw_.attention_backward_efficiency : hw_.attention_efficiency;
      const double seq = static_cast<double>(k.dims[1]);
      const double head_dim = k.dims[2] > 0 ? static_cast<double>(k.dims[2]) : 128.0;
      return t.at(seq) * hw_.attention_head_dim_efficiency.at(head_dim) * hw_.sustained_clock_ratio;
    }
    case OpClass::kVector: return hw_.vector_efficiency.at(k.flops);
  }
  return 1.0;
}

namespace {

// NOTE [Fused norm kernels]: RMSNorm and LayerNorm are recorded as one fused op each way (ops.cc:
// x, weight -> y, rstd; dy, x, rstd, weight -> dx, dweight), as PyTorch's fused kernels
// (torch._fused_rms_norm since 2.8, native_layer_norm) and torchtitan's Triton fused_rmsnorm run
// them. The forward is one kernel; the backward two: the row kernel writing dx and per-block
// fp32 partial sums of dweight, then the reduction of the partials (PyTorch's layer_norm
// backward and the Triton kernel alike). Measured, these kernels move their bytes far below a
// copy's bandwidth (a row reduction, then a column reduction in fp32): the profile's
// norm_memory_efficiency gives the fraction, each cited there. A program that runs the eager
// chain records it op by op (model.implementation rms_norm = eager), so a fused op is priced as
// the fused kernel it is. fullshard's fused RoPE (rope = fused) is one kernel at the memory
// roofline.
bool is_norm(OpKind op) {
  return op == OpKind::kRMSNorm || op == OpKind::kRMSNormBackward || op == OpKind::kLayerNorm ||
         op == OpKind::kLayerNormBackward || op == OpKind::kRMSNormBackwardInput ||
         op == OpKind::kRMSNormBackwardWeight;
}
int kernels_for(OpKind op) {
  // The split parts: the input part one row kernel, the weight part the row kernel's partial
  // sums and their reduction.
  return op == OpKind::kRMSNormBackward || op == OpKind::kLayerNormBackward ||
                 op == OpKind::kRMSNormBackwardWeight
             ? 2
             : 1;
}

}  // namespace

int ComputeModel::eager_kernel_count(const Instr& k) const {
  if (hw_.compute_capability == 0 || k.place != KernelPlace::kDevice) return 1;
  // A collective-matmul (Python in torch.distributed._symmetric_memory) launches, per chunk, its
  // products, a pull and a barrier: about three launches per tp rank.
  if (k.op == OpKind::kAllGatherMatmul || k.op == OpKind::kMatmulReduceScatter)
    return 3 * std::max(1, k.parts);
  // Ring attention's merge is PyTorch's eager _SDPAMerger: 8 pointwise kernels, 10 with a
  // partial update's two cats (kernel_dims in sim_backend.cc).
  if (k.op == OpKind::kSdpaMerge) return k.dims[0] > 0 ? static_cast<int>(k.dims[0]) : 8;
  return kernels_for(k.op);
}

// NOTE [Collective-matmul costs]: the pieces of an async-TP op, from the same figures as the
// eager path: one chunk's products as a GEMM of the chunk's shape {M / tp, K, sum of N}
// (kernel_gap_s per product launched); a pull of one chunk (its A shard for an all-gather, its
// [M / tp, N] partial for a reduce-scatter) at the bus bandwidth NCCL reaches inside the node
// (the copy engine's rate over NVLink; the datasheet's when no bus figure is given); the own
// shard's copy into the symmetric buffer, and the partials' sum, at HBM bandwidth; a barrier
// costs kernel_gap_s (a signal-pad write and poll). The op's FLOPs are those of all its
// products; its chunk FLOPs are FLOPs / tp.
CollectiveMatmulTimes ComputeModel::collective_matmul(const Instr& k) const {
  const int n = std::max(1, k.parts);
  const int64_t rows = k.dims[0], K = k.dims[1], N = k.dims[2];
  const double elt = static_cast<double>(dtype_size(k.dtype));
  Instr chunk = k;
  chunk.op = OpKind::kLinear;
  chunk.flops = k.flops / n;
  chunk.bytes = elt * static_cast<double>(rows * K + K * N + rows * N);
  chunk.parts = 0;
  CollectiveMatmulCosts c;
  c.parts = n;
  c.chunk_matmul_s = device_seconds(chunk);
  const double link =
      hw_.intra_node_bus_bandwidth > 0 ? hw_.intra_node_bus_bandwidth : hw_.nvlink_bandwidth;
  const double chunk_bytes =
      elt * static_cast<double>(rows * (k.op == OpKind::kAllGatherMatmul ? K : N));
  c.chunk_copy_s = link > 0 ? chunk_bytes / link + hw_.kernel_gap_s : 0.0;
  c.barrier_s = hw_.kernel_gap_s;
  auto hbm = [&](double bytes) {
    return bytes > 0
               ? bytes / (hw_.hbm_bandwidth * hw_.memory_efficiency.at(bytes)) + hw_.kernel_gap_s
               : 0.0;
  };
  if (k.op == OpKind::kAllGatherMatmul) {
    c.local_copy_s = hbm(2 * chunk_bytes);
  } else {
    c.reduce_s = hbm(elt * static_cast<double>(rows * N) * (n + 1));  // read tp partials, write one
    return matmul_reduce_scatter_times(c);
  }
  return all_gather_matmul_times(c);
}

double ComputeModel::memory_efficiency(const Instr& k) const {
  const bool gpu = hw_.compute_capability > 0;
  if (gpu && is_norm(k.op)) return hw_.norm_memory_efficiency;
  const double eff = hw_.memory_efficiency.at(k.bytes / (gpu ? kernels_for(k.op) : 1));
  // As NOTE [Converting kernels] (dtype_conversion.h): elementwise kernels only (GEMMs and
  // attention are priced by their FLOPs; a fused norm by its own figure above).
  return k.converts_dtype && op_class(k.op) == OpClass::kVector ? eff * hw_.convert_memory_factor
                                                                : eff;
}

double ComputeModel::device_seconds(const Instr& k) const {
  if (k.op == OpKind::kAllGatherMatmul || k.op == OpKind::kMatmulReduceScatter)
    return collective_matmul(k).total_s;
  const bool gpu = hw_.compute_capability > 0;
  const int kernels = gpu ? kernels_for(k.op) : 1;
  double compute = 0, memory = 0;
  if (k.flops > 0)
    compute = k.flops / (peak_flops(op_class(k.op), k.dtype) * compute_efficiency(k));
  if (k.bytes > 0) memory = k.bytes / (hw_.hbm_bandwidth * memory_efficiency(k));
  return std::max(compute, memory) + kernels * hw_.kernel_gap_s;
}

double ComputeModel::copy_seconds(double transfer_bytes) const {
  if (transfer_bytes <= 0) return 0;
  return transfer_bytes /
         (options_.pinned_memory ? hw_.pinned_copy_bandwidth : hw_.pageable_copy_bandwidth);
}

double ComputeModel::pageable_copy_seconds(double transfer_bytes) const {
  // A profile without the figure copies in no time (as checkpoint_cost prices it).
  return transfer_bytes > 0 && hw_.pageable_copy_bandwidth > 0
             ? transfer_bytes / hw_.pageable_copy_bandwidth
             : 0;
}

double ComputeModel::storage_write_seconds(const Instr& write) const {
  return static_cast<double>(write.coll_bytes) / options_.storage_write_bandwidth;
}

double ComputeModel::host_seconds(double flops, double bytes) const {
  const int cores_per_rank = std::max(1, hw_.host_cores / std::max(1, hw_.gpus_per_node));
  const double threads = std::min(std::max(1, options_.host_threads_per_rank), cores_per_rank);
  const double compute = flops > 0 ? flops / (threads * hw_.host_core_flops) : 0;
  const double bandwidth = std::min(threads * hw_.host_core_memory_bandwidth,
                                    hw_.host_memory_bandwidth / std::max(1, hw_.gpus_per_node));
  const double memory = bytes > 0 ? bytes / bandwidth : 0;
  return std::max(compute, memory);
}

double ComputeModel::kernel_seconds(const Instr& k) const {
  switch (k.place) {
    case KernelPlace::kDevice: return device_seconds(k);
    case KernelPlace::kHost: return host_seconds(k.flops, k.bytes);
    case KernelPlace::kHostToDevice:
    case KernelPlace::kDeviceToHost: return copy_seconds(k.bytes / 2);
    case KernelPlace::kDeviceToPageableHost: return pageable_copy_seconds(k.bytes / 2);
  }
  return 0;
}

// NOTE [Compiled launches]: a torch.compile'd region is a kernel the compiled graph's wrapper
// launches directly (inductor's generated code calls the kernel, no aten dispatch): it costs
// the host launch_overhead_s only. Its GEMMs and SDPA are aten extern calls and keep the
// eager price.
double ComputeModel::launch_seconds(const Instr& k) const {
  if (is_compiled_region(k.op)) return hw_.launch_overhead_s;
  return eager_kernel_count(k) * (hw_.eager_dispatch_s + hw_.launch_overhead_s);
}

}  // namespace fullshard::sim
