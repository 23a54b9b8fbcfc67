#include "simulator/cost/compute_model.h"

#include <algorithm>

namespace fullshard::sim {

OpClass op_class(OpKind k) {
  switch (k) {
    case OpKind::kLinear:
    case OpKind::kLinearBackwardInput:
    case OpKind::kLinearBackwardWeight: return OpClass::kMatmul;
    case OpKind::kAttention:
    case OpKind::kAttentionBackward: return OpClass::kAttention;
    default: return OpClass::kVector;
  }
}

ComputeModel::ComputeModel(const HardwareProfile& hw, ComputeOptions options) : hw_(hw), options_(options) {}

double ComputeModel::peak_flops(OpClass c, DType dtype) const {
  if (c == OpClass::kVector) return hw_.peak_flops_fp32;
  switch (dtype) {
    case DType::kBFloat16: return hw_.peak_flops_bf16;
    case DType::kFloat16: return hw_.peak_flops_fp16;
    default: return hw_.peak_flops_fp32;
  }
}

double ComputeModel::device_seconds(OpKind kind, DType dtype, double flops, double bytes) const {
  const OpClass c = op_class(kind);
  double compute = 0, memory = 0;
  if (flops > 0) {
    const EfficiencyTable& eff = c == OpClass::kMatmul      ? hw_.matmul_efficiency
                                 : c == OpClass::kAttention ? hw_.attention_efficiency
                                                            : hw_.vector_efficiency;
    compute = flops / (peak_flops(c, dtype) * eff.at(flops));
  }
  if (bytes > 0) memory = bytes / (hw_.hbm_bandwidth * hw_.memory_efficiency.at(bytes));
  return std::max(compute, memory);
}

double ComputeModel::copy_seconds(double transfer_bytes) const {
  if (transfer_bytes <= 0) return 0;
  return transfer_bytes / (options_.pinned_memory ? hw_.pinned_copy_bandwidth : hw_.pageable_copy_bandwidth);
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
    case KernelPlace::kDevice: return device_seconds(k.op, k.dtype, k.flops, k.bytes);
    case KernelPlace::kHost: return host_seconds(k.flops, k.bytes);
    case KernelPlace::kHostToDevice:
    case KernelPlace::kDeviceToHost: return copy_seconds(k.bytes / 2);
  }
  return 0;
}

}  // namespace fullshard::sim
