#pragma once
// One accelerator model and the node it ships in: memory, peak throughput and link bandwidths,
// read from scenarios/hardware/<name>.json. Every figure in those files cites its source in
// their "sources" object (docs/hardware.md lists them). The simulator's cost models read these
// numbers; the scenario reads memory to size the caching allocator.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fullshard {

struct HardwareProfile {
  std::string name;         // file stem, e.g. "h100-sxm-80gb"
  std::string description;  // one line, e.g. "NVIDIA H100 SXM5 80GB in an 8-GPU HGX node"
  std::vector<std::string> aliases;  // other names that load this profile, e.g. "h100"
  uint64_t memory_bytes = 0;         // device memory as nvidia-smi reports memory.total
  // Bytes the caching allocator can never get: memory the driver keeps back, the CUDA
  // context, NCCL's communicator buffers, and workspaces allocated outside PyTorch's
  // caching allocator. Allocator capacity = memory_bytes - non_allocator_bytes.
  uint64_t non_allocator_bytes = 0;
  // Dense (no 2:4 sparsity) peak FLOP/s per device. bf16/fp16/tf32 are tensor-core matmul
  // rates; fp32 is the non-tensor (CUDA core) rate.
  double peak_flops_bf16 = 0;
  double peak_flops_fp16 = 0;
  double peak_flops_fp32 = 0;
  double peak_flops_tf32 = 0;
  double hbm_bandwidth = 0;      // device memory bandwidth, bytes/s
  double nvlink_bandwidth = 0;   // intra-node, per device, one direction, bytes/s
  double network_bandwidth = 0;  // inter-node, per device (its NIC share), one direction, bytes/s
  double pcie_bandwidth = 0;     // host <-> device, one direction, bytes/s (CPU offload)
  int gpus_per_node = 0;         // devices (ranks) per node
  std::string source;            // "field: citation | field: citation | ..." for every figure
};

// Where scenarios/ lives: $FULLSHARD_DATA_DIR if set, else the source tree's scenarios/
// (compiled in as FULLSHARD_DEFAULT_DATA_DIR), else "scenarios" relative to the working dir.
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
