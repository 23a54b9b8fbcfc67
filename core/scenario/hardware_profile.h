#pragma once
// One accelerator model and the node it ships in: memory, peak throughput, links, the
// efficiency curves and overheads the simulator's time model uses, and the host CPU that runs
// an offloaded optimizer; read from scenarios/hardware/<name>.json. Every figure in those
// files cites its source in their "sources" object (docs/hardware.md lists them, and
// docs/cost-model.md says how the time model uses each). No coefficient of the time model is
// hidden in code: what is not here is NCCL's own tuning tables (simulator/cost/nccl_model.cc).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fullshard {

// NOTE [Efficiency step tables]: as Calculon's system files (calculon-ai/calculon,
// systems/h100_80g_nvl8.json: "gflops_efficiency", "MB_efficiency"), an op of size `s` (FLOPs
// or bytes) reaches `efficiency` x peak where the row is the first, in descending threshold
// order, whose threshold <= s. The last threshold is 0, so every size has a row.
struct EfficiencyTable {
  std::vector<std::pair<double, double>> rows;  // {threshold, efficiency in [1e-3, 1]}, descending
  double at(double size) const;
  bool operator==(const EfficiencyTable&) const = default;
};

// NOTE [Figure bounds] (hardware_profile.cc): the least rate (FLOP/s, bytes/s) and the least
// fraction a simulated time is divided by (efficiencies, the clock ratio, a rank's speed) that
// any input may give, so that every simulated time stays finite.
inline constexpr double kMinFigureRate = 1;
inline constexpr double kMinFigureFraction = 1e-3;

// The link between the GPUs of one node, as NCCL's latency tables tell them apart.
enum class IntraNodeLink : uint8_t { kNvlink, kPcie };
// The host CPU's vendor: NCCL's network overhead and LL bandwidth cap depend on it.
enum class HostCpu : uint8_t { kIntel, kAmd, kArm };
// How host memory reaches the device (CPU offload copies).
enum class HostLink : uint8_t { kPcie3, kPcie4, kPcie5, kPcie6, kNvlinkC2C, kMemory };

const char* intra_node_link_name(IntraNodeLink l);  // "nvlink", "pcie"
const char* host_cpu_name(HostCpu c);               // "intel", "amd", "arm"
const char* host_link_name(HostLink l);             // "pcie5", "nvlink-c2c", "memory", ...

struct HardwareProfile {
  std::string name;                  // file stem, e.g. "h100-sxm-80gb"
  std::string description;           // one line, e.g. "NVIDIA H100 SXM5 80GB in an 8-GPU HGX node"
  std::vector<std::string> aliases;  // other names that load this profile, e.g. "h100"
  // ---- memory
  uint64_t memory_bytes = 0;  // device memory as nvidia-smi reports memory.total
  // The device total as CUDA and PyTorch see it (torch.cuda.get_device_properties().total_memory,
  // cudaMemGetInfo's total, the "total capacity" of PyTorch's OOM message): memory_bytes less
  // what the driver keeps back. NOTE [Two device totals] in hardware_profile.cc.
  uint64_t cuda_total_memory_bytes = 0;
  // Bytes the caching allocator can never get: memory the driver keeps back, the CUDA
  // context, NCCL's communicator buffers, and workspaces allocated outside PyTorch's
  // caching allocator. Allocator capacity = memory_bytes - non_allocator_bytes, at most
  // cuda_total_memory_bytes (the driver's reserve is part of non_allocator_bytes).
  uint64_t non_allocator_bytes = 0;
  // Bytes of the cuBLAS workspace PyTorch takes from its caching allocator for each (cuBLAS
  // handle, stream) pair at the pair's first matmul, and keeps: CUBLAS_WORKSPACE_CONFIG's total
  // (NOTE [cuBLAS workspaces] in core/runtime/backend.cc). 0: none (CPU).
  uint64_t blas_workspace_bytes = 0;
  // ---- compute
  // Dense (no 2:4 sparsity) peak FLOP/s per device. bf16/fp16/tf32 are tensor-core matmul
  // rates; fp32 is the non-tensor (CUDA core) rate.
  double peak_flops_bf16 = 0;
  double peak_flops_fp16 = 0;
  double peak_flops_fp32 = 0;
  double peak_flops_tf32 = 0;
  // Dense float8 (e4m3 / e5m2) tensor-core rate, what torch._scaled_mm runs at; 0: the GPU has
  // no float8 tensor cores (before sm_89) and training.float8 is refused on it.
  double peak_flops_fp8 = 0;
  double hbm_bandwidth = 0;    // device memory bandwidth, bytes/s
  int compute_capability = 0;  // CUDA compute capability x 10 (90 = Hopper); 0: not a GPU
  // NOTE [Measured kernel efficiencies]: what measured kernels reach, not datasheet peaks
  // (docs/cost-model.md, "Compute").
  // GEMMs, by FLOPs: the fraction of peak a well-shaped product of that size reaches (the best
  // measured bf16 GEMM); the shape model below scales it down for shapes that fill the GPU
  // badly: d / (d + matmul_small_dim) for each of M, N, K.
  EfficiencyTable matmul_efficiency;
  double matmul_small_dim = 0;  // d0 in d / (d + d0): a GEMM dimension's efficiency factor
  // Causal flash attention (head dim 128), by sequence length: forward and backward.
  EfficiencyTable attention_efficiency;           // forward
  EfficiencyTable attention_backward_efficiency;  // backward
  EfficiencyTable attention_head_dim_efficiency;  // multiplier by head dim (1 at 128)
  EfficiencyTable vector_efficiency;              // non-matmul FLOPs on CUDA cores, by FLOPs
  EfficiencyTable memory_efficiency;              // device-memory traffic, by bytes
  // Fused normalization kernels (RMSNorm / LayerNorm, forward and backward: PyTorch's fused
  // kernels, torchtitan's Triton one): the fraction of hbm_bandwidth their recorded bytes move
  // at. Row reductions with an fp32 weight-gradient reduction reach far less than a copy
  // (NOTE [Fused norm kernels] in simulator/cost/compute_model.cc).
  double norm_memory_efficiency = 1;
  // Memory-bound kernels that convert dtypes element by element (a bf16 -> fp32 cast, an fp32 x
  // bf16 product; NOTE [Converting kernels] in simulator/cost/dtype_conversion.h) move their
  // bytes at memory_efficiency x this factor. Optional in a profile file: 1 when absent (priced
  // as same-dtype kernels).
  double convert_memory_factor = 1;
  double launch_overhead_s = 0;  // host seconds per kernel / collective launch (CUDA)
  double eager_dispatch_s = 0;   // host seconds PyTorch eager spends per op before the launch
  double kernel_gap_s = 0;       // device seconds between dependent kernels (launch latency)
  // Host seconds of FSDP2's Python per hook call (pre-/post-forward, pre-/post-backward of a
  // unit), and per parameter of its group, beyond the launches it makes (NOTE [FSDP hook host
  // cost] in simulator/cost/hardware_cost_model.cc).
  double fsdp_hook_s = 0;
  double fsdp_hook_param_s = 0;
  // Sustained tensor-core clock under this deployment's power limit / the clock at which the
  // efficiencies were measured (1: the part's default power limit).
  double sustained_clock_ratio = 1;
  // Fraction of a compute kernel's throughput lost while a collective runs beside it on the
  // same device (NCCL's kernels take SMs and memory bandwidth): intra-node and inter-node.
  double overlap_slowdown_nvlink = 0;
  double overlap_slowdown_network = 0;
  // ---- links
  int gpus_per_node = 0;  // devices (ranks) per node
  IntraNodeLink intra_node_link = IntraNodeLink::kNvlink;
  double nvlink_bandwidth = 0;  // intra-node, per device, one direction, bytes/s (datasheet)
  // NVSwitch with NVLink SHARP: NCCL's NVLS / NVLS-tree algorithms are available.
  bool nvls = false;
  double nvls_efficiency = 0;  // NCCL's nvlsEfficiency for this architecture
  int nccl_channels = 0;       // channels NCCL's graphs use (per-channel bandwidth caps)
  // Bus bandwidth (nccl-tests' busbw) NCCL's ring reaches inside one node, bytes/s: NCCL's
  // nChannels x bwIntra. A measured nccl-tests figure calibrates it.
  double intra_node_bus_bandwidth = 0;
  double network_bandwidth = 0;      // inter-node, per device (its NIC), one direction, bytes/s
  double network_bus_bandwidth = 0;  // what NCCL reaches through one device's NIC, bytes/s
  HostCpu host_cpu = HostCpu::kIntel;
  // ---- host and CPU offload
  HostLink host_link = HostLink::kPcie5;
  double pcie_bandwidth = 0;           // host <-> device link, one direction, bytes/s (datasheet)
  double pinned_copy_bandwidth = 0;    // achieved H2D / D2H from page-locked memory, bytes/s
  double pageable_copy_bandwidth = 0;  // achieved H2D / D2H from pageable memory, bytes/s
  int host_cores = 0;                  // CPU cores per node
  double host_core_flops = 0;          // fp32 FLOP/s of one core
  double host_core_memory_bandwidth = 0;  // bytes/s one core streams
  double host_memory_bandwidth = 0;       // bytes/s of the node's memory system
  // Host DRAM of one node, bytes; 0: not known (nothing is checked against it). CPU offload and
  // async checkpoint staging keep each rank's pinned host buffers there (NOTE [Host memory per
  // node] in simulator/host_memory.h).
  uint64_t host_memory_bytes = 0;
  std::string source;  // "field: citation | field: citation | ..." for every figure
};

// The figure names a profile must give (each cited in "sources"), in file order.
const std::vector<std::string>& hardware_profile_figures();

// Sets every figure of `p` that `obj` (a JSON object) contains, skipping names in `skip`,
// with the profile's own validation; errors name `path_prefix`.figure. Scenarios use it to
// override profile figures (NOTE [Hardware overrides] in scenario.cc). Returns the figures set.
std::vector<std::string> apply_hardware_figures(HardwareProfile& p, const nlohmann::json& obj,
                                                const std::string& path_prefix,
                                                const std::vector<std::string>& skip = {});
// Cross-figure rules (NVLS needs an efficiency, ...). Throws InputError at `path_prefix`.figure.
void check_hardware_profile(const HardwareProfile& p, const std::string& path_prefix);

// NOTE [Ranks per node]: a scenario's hardware.gpus_per_node is the ranks torchrun starts on
// each node. A GPU profile describes one node (its NVLink fabric, NICs per GPU, host cores), so a
// scenario may use fewer of its GPUs (a 4-rank job on an 8-GPU node: every used GPU keeps its own
// links and NIC; host figures per rank are re-derived from host_cores / gpus_per_node), never more:
// 16 ranks per node on an 8-GPU HGX profile is a node that does not exist. CPU profiles
// (compute_capability 0) describe a host, where any number of rank processes can run. Throws
// InputError at `where` naming both values and the fix.
void check_gpus_per_node(const HardwareProfile& p, int gpus_per_node, const std::string& where);

// Where scenarios/ lives: $FULLSHARD_DATA_DIR if set, else ../share/fullshard/scenarios next to
// the running executable (an installed CLI), else the source tree's scenarios/ (compiled in as
// FULLSHARD_DEFAULT_DATA_DIR), else "scenarios" relative to the working dir.
std::string data_dir();
std::string hardware_profile_dir();  // data_dir() + "/hardware"

// Names of every profile (file stems), sorted.
std::vector<std::string> list_hardware_profiles();
// Every alias with the profile it names, sorted by alias: {"h100", "h100-sxm-80gb"}, ...
std::vector<std::pair<std::string, std::string>> list_hardware_profile_aliases();

// The profile called `name` (case-insensitive) or one of its aliases; nullopt when none has
// that name. A profile file that exists but is malformed is an InputError.
std::optional<HardwareProfile> find_hardware_profile(const std::string& name);
// As find_hardware_profile, but an unknown name is an InputError whose where is `where` and
// whose fix lists the known profiles (and the closest name).
HardwareProfile load_hardware_profile(const std::string& name,
                                      const std::string& where = "hardware.profile");
// Reads a profile from an explicit file (any name). Malformed files are InputErrors.
HardwareProfile load_hardware_profile_file(const std::string& path);

}  // namespace fullshard
