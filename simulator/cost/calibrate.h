#pragma once
// Calibration: fit a hardware profile's time-model figures to measured timings (nccl-tests
// results, kernel timings) so the simulator predicts *this* cluster. docs/cost-model.md
// ("Calibration") describes the method; `fullshard calibrate` is the CLI.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/scenario/hardware_profile.h"
#include "simulator/cost/compute_model.h"
#include "simulator/cost/nccl_model.h"

namespace fullshard::sim {

// One nccl-tests-style measurement: a collective of `bytes` (NCCL's size: the whole buffer)
// over `nodes` x `ranks_per_node` GPUs took `time_s`.
struct CollectiveSample {
  nccl::Func func = nccl::Func::kAllReduce;
  int nodes = 1;
  int ranks_per_node = 8;
  double bytes = 0;
  double time_s = 0;
};

// One device-kernel measurement.
struct KernelSample {
  OpClass op = OpClass::kMatmul;
  bool backward = false;  // "attention_backward", "norm_backward"
  DType dtype = DType::kBFloat16;
  // Shape (NOTE [Kernel shapes]): a GEMM's {M, K, N} ("m", "k", "n"); attention's
  // {0, seq, head_dim} ("seq", "head_dim"); zeros when not given.
  std::array<int64_t, 3> dims{};
  double flops = 0;
  double bytes = 0;
  double time_s = 0;
  // "norm" / "norm_backward": a fused RMSNorm / LayerNorm kernel (forward, or its backward's
  // two kernels), which fits norm_memory_efficiency (NOTE [Fused norm kernels]).
  bool norm = false;
  // The dtype it writes ("out_dtype"; none: dtype): an elementwise sample reading `dtype` and
  // writing `out_dtype` that converts_dtype() calls converting (a bf16 -> fp32 cast) is a
  // "convert" sample, which fits convert_memory_factor (NOTE [Converting kernels]).
  std::optional<DType> out_dtype;
};

// NOTE [Direct samples]: figures a measurement reads off directly rather than a fit through the
// time model (tools/measure/measure.py writes them as kernel rows with these ops):
//   "kernel_gap"    time_s = device seconds per kernel in a chain of tiny dependent kernels;
//   "eager_op"      time_s = host seconds of one eager PyTorch op (dispatch + launch, no sync);
//   "copy_pinned"   bytes / time_s = H2D or D2H bandwidth from page-locked host memory;
//   "copy_pageable" the same from pageable memory;
//   "fsdp_hook"     time_s = host seconds of one FSDP2 hook call on a unit of "params"
//                   parameters, beyond the ops it launches (tools/measure/fsdp_hooks.py).
// Each figure becomes the median of its samples (eager_dispatch_s: less launch_overhead_s).
// The hook samples are a line: fsdp_hook_s + params x fsdp_hook_param_s, least squares over
// samples of two or more parameter counts (both figures, clamped at 0); samples of one count
// fit fsdp_hook_s alone, keeping the profile's per-parameter figure (NOTE [FSDP hook host
// cost] in simulator/cost/hardware_cost_model.cc).
enum class DirectFigure : uint8_t { kKernelGap, kEagerOp, kCopyPinned, kCopyPageable, kFsdpHook };
struct DirectSample {
  DirectFigure figure = DirectFigure::kKernelGap;
  double bytes = 0;
  double time_s = 0;
  int64_t params = 0;  // "fsdp_hook": parameters in the hooked unit
};

struct CalibrationInput {
  std::vector<CollectiveSample> collectives;
  std::vector<KernelSample> kernels;
  std::vector<DirectSample> direct;
  // PyTorch's cuBLAS workspace as tools/measure/blas_workspace.py measured it (its JSON's
  // forward / backward_workspace_bytes): sets blas_workspace_bytes. 0: not measured.
  int64_t blas_workspace_bytes = 0;
};

// Reads tools/measure/blas_workspace.py's JSON ({"forward_workspace_bytes": N,
// "backward_workspace_bytes": N, ...}): true when `j` is one (then `in` gains its workspace).
bool parse_blas_workspace_measurement(const nlohmann::json& j, CalibrationInput& in);

// Reads {"collectives": [...], "kernels": [...]} (docs/cost-model.md, "Calibration"); a
// collective gives "time_us" or nccl-tests' "busbw_gbs". Bad input: InputError at its path.
CalibrationInput parse_calibration_input(const nlohmann::json& j);

// One kernel class's fit ("matmul", "attention", "attention_backward", "norm",
// "norm_backward", "vector": the CSV's op; "convert": a vector sample that converts dtypes),
// RMS log error before and after.
struct KernelClassError {
  std::string name;
  int samples = 0;
  double before = 0, after = 0;
};

struct Calibration {
  HardwareProfile profile;          // the fitted profile
  std::vector<std::string> fitted;  // figures changed, in the order they were fitted
  // Root-mean-square of ln(predicted / measured) over the samples, before and after.
  double collective_error_before = 0, collective_error_after = 0;
  double kernel_error_before = 0, kernel_error_after = 0;
  std::vector<KernelClassError> kernel_classes;  // the kernel errors per class, in that order
  // NOTE [Launch-bound samples]: kernel samples no longer than the host's launch of one eager op
  // (its "eager_op" sample, x 1.25) timed the host, not the device: left out of the fit and of
  // the errors, and counted here; so is a "kernel_gap" sample over half of it.
  int launch_bound_samples = 0;
  bool kernel_gap_launch_bound = false;
};

// Fits intra_node_bus_bandwidth (one-node samples), nvls_efficiency (one-node all-reduces,
// NVLS hardware), network_bus_bandwidth (multi-node samples) and the efficiency tables'
// entries that samples fall into (memory_efficiency from same-dtype samples, then
// convert_memory_factor from converting ones, NOTE [Converting kernels]); kernel_gap_s,
// eager_dispatch_s, the copy bandwidths and fsdp_hook_s / fsdp_hook_param_s from direct samples
// (NOTE [Direct samples]). NCCL's latency tables are not fitted.
Calibration calibrate(const HardwareProfile& start, const CalibrationInput& input);

// A kernel sample's class (KernelClassError's names), and whether it is launch-bound (NOTE
// [Launch-bound samples]) among `input`'s samples.
std::string kernel_class_name(const KernelSample& s);
bool launch_bound(const KernelSample& s, const CalibrationInput& input);

// Predicted seconds for a sample under a profile (what calibrate() fits).
double predict(const HardwareProfile& p, const CollectiveSample& s);
double predict(const HardwareProfile& p, const KernelSample& s);

}  // namespace fullshard::sim
