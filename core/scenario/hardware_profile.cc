#include "core/scenario/hardware_profile.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/json_file.h"
#include "core/scenario/json_reader.h"

namespace fullshard {
namespace {

namespace fs = std::filesystem;
namespace jr = json_reader;
using nlohmann::json;

// NOTE [Figure table]: every figure is read by one entry of this table, both from a profile
// file (all required but kOptionalFigures) and from a scenario's "hardware" object (any of them,
// as an override), so the two always validate the same way.
using Reader = std::function<void(HardwareProfile&, const json&, const std::string&)>;
struct Figure {
  std::string name;
  Reader read;
};

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Reader bytes_figure(uint64_t HardwareProfile::*m, int64_t min, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = static_cast<uint64_t>(jr::get_int(v, path, min, kMax, example));
  };
}
Reader int_figure(int HardwareProfile::*m, int64_t min, int64_t max, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = static_cast<int>(jr::get_int(v, path, min, max, example));
  };
}
// NOTE [Figure bounds]: the simulator prices a kernel at work / (rate x efficiency x clock
// ratio x GEMM shape factor x rank speed x (1 - overlap slowdown, at most 0.95)) and adds
// per-launch seconds, over up to 1e8 played instructions (docs/scenario-format.md, limits),
// and every time must stay finite: a rate of
// 1e-320 FLOP/s, an efficiency of 5e-324 or a launch overhead of 1e308 s made one kernel or the
// step's sum infinite (an internal error, or a report whose step time is null). So each figure
// is bounded far outside any hardware: rates >= 1 (FLOP/s, bytes/s), the fractions a time is
// divided by >= kMinFraction (fullshard calibrate fits tables no lower), per-call seconds <= 1,
// matmul_small_dim <= 65536. The worst case, a GEMM at 1 / (1 x 1e-3^3 x (1/65537)^3 x 0.05),
// prices 1e30 FLOPs at about 6e54 s, still finite summed over any accepted simulation.
constexpr double kMinRate = kMinFigureRate;
constexpr double kMinFraction = kMinFigureFraction;
constexpr double kMaxCallSeconds = 1;
constexpr double kMaxSmallDim = 65536;

// A rate (FLOP/s, bytes/s): finite, >= 1 (NOTE [Figure bounds]).
Reader rate_figure(double HardwareProfile::*m, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = jr::get_number(v, path, kMinRate, true, kInf, false, example);
  };
}
// Seconds per call (a launch, a dispatch, a hook): in [0, 1].
Reader seconds_figure(double HardwareProfile::*m, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = jr::get_number(v, path, 0, true, kMaxCallSeconds, true, example);
  };
}
// A fraction in [0, 1] (or [0, 1) with below_one).
Reader fraction_figure(double HardwareProfile::*m, bool below_one, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = jr::get_number(v, path, 0, true, 1, !below_one, example);
  };
}
// A fraction a time is divided by: in [kMinFraction, 1].
Reader divisor_fraction_figure(double HardwareProfile::*m, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = jr::get_number(v, path, kMinFraction, true, 1, true, example);
  };
}
Reader bool_figure(bool HardwareProfile::*m) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    p.*m = jr::get_bool(v, path);
  };
}
template <typename E>
Reader choice_figure(E HardwareProfile::*m, std::vector<std::pair<std::string, E>> choices) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    std::vector<std::string> names;
    for (const auto& c : choices) names.push_back(c.first);
    const std::string s = jr::get_choice(v, path, names);
    for (const auto& c : choices)
      if (c.first == s) p.*m = c.second;
  };
}
// [[threshold, efficiency], ...]: thresholds >= 0 strictly descending, the last one 0,
// efficiencies in [kMinFraction, 1] (NOTE [Efficiency step tables], NOTE [Figure bounds]).
Reader table_figure(EfficiencyTable HardwareProfile::*m, const char* example) {
  return [=](HardwareProfile& p, const json& v, const std::string& path) {
    const std::string fix = std::string(
                                "write rows [threshold, efficiency] with descending thresholds "
                                "ending at 0, e.g. ") +
                            example;
    if (!v.is_array() || v.empty())
      throw InputError(path, "is " + jr::describe(v) + ", not a non-empty array", fix);
    EfficiencyTable t;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string row = jr::index_path(path, i);
      if (!v[i].is_array() || v[i].size() != 2)
        throw InputError(row, "is " + jr::describe(v[i]) + ", not a [threshold, efficiency] pair",
                         fix);
      const double th =
          jr::get_number(v[i][0], jr::index_path(row, 0), 0, true, kInf, false, "1e9");
      const double eff =
          jr::get_number(v[i][1], jr::index_path(row, 1), kMinFraction, true, 1, true, "0.9");
      if (!t.rows.empty() && th >= t.rows.back().first)
        throw InputError(jr::index_path(row, 0),
                         "is " + jr::show(v[i][0]) + ", not below the previous threshold", fix);
      t.rows.emplace_back(th, eff);
    }
    if (t.rows.back().first != 0)
      throw InputError(jr::index_path(jr::index_path(path, v.size() - 1), 0),
                       "is " + jr::show(v.back()[0]) + ", so smaller sizes have no efficiency",
                       "end the table with a row whose threshold is 0, e.g. [0, 0.1]");
    p.*m = std::move(t);
  };
}

const std::vector<Figure>& figures() {
  using P = HardwareProfile;
  static const std::vector<Figure> table = {
      {"memory_bytes", bytes_figure(&P::memory_bytes, 1, "85520809984")},
      {"cuda_total_memory_bytes", bytes_figure(&P::cuda_total_memory_bytes, 1, "85027979264")},
      {"non_allocator_bytes", bytes_figure(&P::non_allocator_bytes, 0, "2103443456")},
      {"blas_workspace_bytes", bytes_figure(&P::blas_workspace_bytes, 0, "33554432")},
      {"peak_flops_bf16", rate_figure(&P::peak_flops_bf16, "989.4e12")},
      {"peak_flops_fp16", rate_figure(&P::peak_flops_fp16, "989.4e12")},
      {"peak_flops_fp32", rate_figure(&P::peak_flops_fp32, "66.9e12")},
      {"peak_flops_tf32", rate_figure(&P::peak_flops_tf32, "494.7e12")},
      {"peak_flops_fp8", rate_figure(&P::peak_flops_fp8, "1978.9e12")},
      {"hbm_bandwidth", rate_figure(&P::hbm_bandwidth, "3.35e12")},
      {"compute_capability", int_figure(&P::compute_capability, 0, 1000, "90")},
      {"matmul_efficiency",
       table_figure(&P::matmul_efficiency, "[[128e9, 0.95], [16e9, 0.9], [1e9, 0.6], [0, 0.1]]")},
      {"matmul_small_dim",
       [](HardwareProfile& p, const json& v, const std::string& path) {
         p.matmul_small_dim = jr::get_number(v, path, 0, true, kMaxSmallDim, true, "64");
       }},
      {"attention_efficiency", table_figure(&P::attention_efficiency, "[[8192, 0.34], [0, 0.2]]")},
      {"attention_backward_efficiency",
       table_figure(&P::attention_backward_efficiency, "[[8192, 0.29], [0, 0.13]]")},
      {"attention_head_dim_efficiency",
       table_figure(&P::attention_head_dim_efficiency,
                    "[[256, 0.8], [128, 1], [64, 0.87], [0, 0.5]]")},
      {"vector_efficiency",
       table_figure(&P::vector_efficiency, "[[16e9, 0.95], [1e9, 0.5], [0, 0.1]]")},
      {"memory_efficiency",
       table_figure(&P::memory_efficiency, "[[100e6, 0.9], [10e6, 0.75], [1e6, 0.6], [0, 0.3]]")},
      {"norm_memory_efficiency", divisor_fraction_figure(&P::norm_memory_efficiency, "0.4")},
      {"convert_memory_factor", divisor_fraction_figure(&P::convert_memory_factor, "0.5")},
      {"launch_overhead_s", seconds_figure(&P::launch_overhead_s, "5e-6")},
      {"eager_dispatch_s", seconds_figure(&P::eager_dispatch_s, "10e-6")},
      {"kernel_gap_s", seconds_figure(&P::kernel_gap_s, "2e-6")},
      {"fsdp_hook_s", seconds_figure(&P::fsdp_hook_s, "100e-6")},
      {"fsdp_hook_param_s", seconds_figure(&P::fsdp_hook_param_s, "6e-6")},
      {"sustained_clock_ratio", divisor_fraction_figure(&P::sustained_clock_ratio, "0.85")},
      {"overlap_slowdown_nvlink", fraction_figure(&P::overlap_slowdown_nvlink, true, "0.15")},
      {"overlap_slowdown_network", fraction_figure(&P::overlap_slowdown_network, true, "0.02")},
      {"gpus_per_node", int_figure(&P::gpus_per_node, 1, 1 << 20, "8")},
      {"intra_node_link",
       choice_figure<IntraNodeLink>(&P::intra_node_link, {{"nvlink", IntraNodeLink::kNvlink},
                                                          {"pcie", IntraNodeLink::kPcie}})},
      {"nvlink_bandwidth", rate_figure(&P::nvlink_bandwidth, "450e9")},
      {"nvls", bool_figure(&P::nvls)},
      {"nvls_efficiency", fraction_figure(&P::nvls_efficiency, false, "0.85")},
      {"nccl_channels", int_figure(&P::nccl_channels, 1, 64, "16")},
      {"intra_node_bus_bandwidth", rate_figure(&P::intra_node_bus_bandwidth, "370.8e9")},
      {"network_bandwidth", rate_figure(&P::network_bandwidth, "50e9")},
      {"network_bus_bandwidth", rate_figure(&P::network_bus_bandwidth, "44e9")},
      {"host_cpu", choice_figure<HostCpu>(&P::host_cpu, {{"intel", HostCpu::kIntel},
                                                         {"amd", HostCpu::kAmd},
                                                         {"arm", HostCpu::kArm}})},
      {"host_link", choice_figure<HostLink>(&P::host_link, {{"pcie3", HostLink::kPcie3},
                                                            {"pcie4", HostLink::kPcie4},
                                                            {"pcie5", HostLink::kPcie5},
                                                            {"pcie6", HostLink::kPcie6},
                                                            {"nvlink-c2c", HostLink::kNvlinkC2C},
                                                            {"memory", HostLink::kMemory}})},
      {"pcie_bandwidth", rate_figure(&P::pcie_bandwidth, "64e9")},
      {"pinned_copy_bandwidth", rate_figure(&P::pinned_copy_bandwidth, "54e9")},
      {"pageable_copy_bandwidth", rate_figure(&P::pageable_copy_bandwidth, "27e9")},
      {"host_cores", int_figure(&P::host_cores, 1, 1 << 20, "112")},
      {"host_core_flops", rate_figure(&P::host_core_flops, "128e9")},
      {"host_core_memory_bandwidth", rate_figure(&P::host_core_memory_bandwidth, "12e9")},
      {"host_memory_bandwidth", rate_figure(&P::host_memory_bandwidth, "614e9")},
      {"host_memory_bytes", bytes_figure(&P::host_memory_bytes, 0, "2199023255552")},
  };
  return table;
}

// Figures added after profiles were in users' hands: a file without one keeps the
// HardwareProfile default (which prices as before the figure existed); a file that gives one
// cites it like any other.
const std::vector<std::string> kOptionalFigures = {"convert_memory_factor", "peak_flops_fp8"};

bool optional_figure(const std::string& f) {
  return std::find(kOptionalFigures.begin(), kOptionalFigures.end(), f) != kOptionalFigures.end();
}

std::vector<std::string> known_fields() {
  std::vector<std::string> k = {"name", "description", "aliases", "sources"};
  const auto& f = hardware_profile_figures();
  k.insert(k.end(), f.begin(), f.end());
  return k;
}

// A figure as a user writes it: 0, 1e-09, 0.85.
std::string shown(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Profile names are file stems: keep them to a safe alphabet so a name can never walk out of
// the hardware directory.
bool is_plain_name(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                              c == '.';
                     }) &&
         s.find("..") == std::string::npos;
}

// Errors inside a profile file name the file first: "h100.json: memory_bytes: ...".
[[noreturn]] void rethrow_in_file(const InputError& e, const std::string& file) {
  const std::string what = e.what();
  const std::string rest =
      what.size() > e.where().size() + 2 ? what.substr(e.where().size() + 2) : what;
  throw InputError(e.where().empty() ? file : file + ": " + e.where(), rest, "");
}

HardwareProfile parse_profile(const json& j) {
  jr::require_object(j, "", "{\"name\": \"h100-sxm-80gb\", \"memory_bytes\": ...}");
  jr::reject_unknown_fields(j, "", known_fields());
  for (const auto& f : known_fields())
    if (f != "aliases" && f != "description" && !optional_figure(f))
      jr::require_field(j, "", f, "every profile gives " + f + " (see docs/hardware.md)");

  HardwareProfile p;
  p.name = jr::get_string(j.at("name"), "name", "\"h100-sxm-80gb\"");
  if (j.contains("description"))
    p.description = jr::get_string(j.at("description"), "description", "\"NVIDIA H100 SXM5\"");
  if (j.contains("aliases")) {
    const json& a = j.at("aliases");
    if (!a.is_array())
      throw InputError("aliases", "is " + jr::describe(a) + ", not an array",
                       "write a list of names, e.g. [\"h100\"]");
    for (size_t i = 0; i < a.size(); ++i)
      p.aliases.push_back(lower(jr::get_string(a[i], jr::index_path("aliases", i), "\"h100\"")));
  }
  apply_hardware_figures(p, j, "");
  if (p.non_allocator_bytes >= p.memory_bytes)
    throw InputError("non_allocator_bytes",
                     "is " + std::to_string(p.non_allocator_bytes) +
                         ", not less than memory_bytes " + std::to_string(p.memory_bytes),
                     "the allocator needs some memory: give a smaller value");
  // NOTE [Two device totals]: nvidia-smi's memory.total (memory_bytes) counts memory the driver
  // keeps for itself; CUDA, and so PyTorch's total_memory and its OOM messages, report the rest
  // (cuda_total_memory_bytes: 470 MiB less on an H100 80GB). The simulator's allocator capacity,
  // memory_bytes - non_allocator_bytes, must fit inside CUDA's total, so the driver's reserve is
  // part of non_allocator_bytes; a profile that says otherwise promises memory PyTorch never sees.
  if (p.cuda_total_memory_bytes > p.memory_bytes)
    throw InputError("cuda_total_memory_bytes",
                     "is " + std::to_string(p.cuda_total_memory_bytes) +
                         ", more than memory_bytes " + std::to_string(p.memory_bytes) +
                         " (nvidia-smi's total)",
                     "give torch.cuda.get_device_properties().total_memory, which is at most "
                     "nvidia-smi's memory.total");
  if (p.non_allocator_bytes < p.memory_bytes - p.cuda_total_memory_bytes)
    throw InputError(
        "non_allocator_bytes",
        "is " + std::to_string(p.non_allocator_bytes) +
            ", less than the driver's reserve memory_bytes - "
            "cuda_total_memory_bytes = " +
            std::to_string(p.memory_bytes - p.cuda_total_memory_bytes),
        "include the memory nvidia-smi counts but CUDA does not report in non_allocator_bytes");
  check_hardware_profile(p, "");

  // NOTE [Cited figures]: a profile is only as good as its numbers, so every figure must say
  // where it comes from (a datasheet, a measurement) in "sources".
  const json& sources = j.at("sources");
  jr::require_object(sources, "sources", "{\"memory_bytes\": \"NVIDIA H100 datasheet: 80 GB\"}");
  jr::reject_unknown_fields(sources, "sources", hardware_profile_figures());
  for (const auto& f : hardware_profile_figures()) {
    if (optional_figure(f) && !j.contains(f)) {
      // An absent optional figure may still say why (an A100's "no float8 tensor cores").
      if (sources.contains(f))
        p.source += (p.source.empty() ? "" : " | ") + f + ": " +
                    jr::get_string(sources.at(f), jr::child_path("sources", f), "\"none: ...\"");
      continue;
    }
    jr::require_field(sources, "sources", f, "cite where the value of " + f + " comes from");
    const std::string cite =
        jr::get_string(sources.at(f), jr::child_path("sources", f), "\"NVIDIA H100 datasheet\"");
    if (cite.empty())
      throw InputError(jr::child_path("sources", f), "is empty",
                       "cite where the figure comes from");
    p.source += (p.source.empty() ? "" : " | ") + f + ": " + cite;
  }
  return p;
}

std::vector<fs::path> profile_files() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(hardware_profile_dir(), ec), end; !ec && it != end;
       it.increment(ec))
    if (it->path().extension() == ".json") files.push_back(it->path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

double EfficiencyTable::at(double size) const {
  for (const auto& [threshold, efficiency] : rows)
    if (size >= threshold) return efficiency;
  return rows.empty() ? 1.0 : rows.back().second;
}

const char* intra_node_link_name(IntraNodeLink l) {
  return l == IntraNodeLink::kNvlink ? "nvlink" : "pcie";
}

const char* host_cpu_name(HostCpu c) {
  switch (c) {
    case HostCpu::kIntel: return "intel";
    case HostCpu::kAmd: return "amd";
    case HostCpu::kArm: return "arm";
  }
  return "?";
}

const char* host_link_name(HostLink l) {
  switch (l) {
    case HostLink::kPcie3: return "pcie3";
    case HostLink::kPcie4: return "pcie4";
    case HostLink::kPcie5: return "pcie5";
    case HostLink::kPcie6: return "pcie6";
    case HostLink::kNvlinkC2C: return "nvlink-c2c";
    case HostLink::kMemory: return "memory";
  }
  return "?";
}

const std::vector<std::string>& hardware_profile_figures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& f : figures()) n.push_back(f.name);
    return n;
  }();
  return names;
}

std::vector<std::string> apply_hardware_figures(HardwareProfile& p, const json& obj,
                                                const std::string& path_prefix,
                                                const std::vector<std::string>& skip) {
  std::vector<std::string> set;
  for (const auto& f : figures()) {
    if (!obj.contains(f.name) || std::find(skip.begin(), skip.end(), f.name) != skip.end())
      continue;
    f.read(p, obj.at(f.name), jr::child_path(path_prefix, f.name));
    set.push_back(f.name);
  }
  return set;
}

void check_hardware_profile(const HardwareProfile& p, const std::string& prefix) {
  if (p.nvls && p.nvls_efficiency < kMinFraction)  // NOTE [Figure bounds]
    throw InputError(
        jr::child_path(prefix, "nvls_efficiency"),
        "is " + shown(p.nvls_efficiency) + " while nvls is true, below " + shown(kMinFraction),
        "give NCCL's NVLS efficiency for the architecture (0.85 Hopper, 0.74 Blackwell) or set "
        "nvls to false");
  if (p.nvls && p.intra_node_link != IntraNodeLink::kNvlink)
    throw InputError(jr::child_path(prefix, "nvls"), "is true but intra_node_link is \"pcie\"",
                     "NVLS needs NVSwitch: set nvls to false or intra_node_link to \"nvlink\"");
  if (!(p.sustained_clock_ratio >= kMinFraction))
    throw InputError(jr::child_path(prefix, "sustained_clock_ratio"),
                     "is " + shown(p.sustained_clock_ratio) + ", below " + shown(kMinFraction),
                     "give the sustained clock under the power limit / the measured clock, in "
                     "[0.001, 1], e.g. 0.85");
  if (!(p.norm_memory_efficiency >= kMinFraction))
    throw InputError(
        jr::child_path(prefix, "norm_memory_efficiency"),
        "is " + shown(p.norm_memory_efficiency) + ", below " + shown(kMinFraction),
        "give the fraction of hbm_bandwidth fused norm kernels reach, in [0.001, 1], e.g. 0.4");
}

void check_gpus_per_node(const HardwareProfile& p, int gpus_per_node, const std::string& where) {
  if (p.compute_capability == 0 || gpus_per_node <= p.gpus_per_node)
    return;  // NOTE [Ranks per node]
  throw InputError(
      where,
      "is " + std::to_string(gpus_per_node) + ", but profile '" + p.name +
          "' describes a node of " + std::to_string(p.gpus_per_node) +
          " GPUs (its gpus_per_node; links, NICs and host are that node's)",
      "use at most " + std::to_string(p.gpus_per_node) +
          " GPUs per node (more nodes for more GPUs), or a profile of the larger node (a copy of "
          "the profile with its own gpus_per_node, links and sources)");
}

std::string data_dir() {
  if (const char* env = std::getenv("FULLSHARD_DATA_DIR"); env != nullptr && *env != '\0')
    return env;
  // NOTE [Install tree] (cmake/FullshardInstall.cmake): an installed binary (P/bin) finds the
  // scenarios installed beside it; a build-tree binary has no such folder and uses the source's.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed =
        exe.parent_path().parent_path() / "share" / "fullshard" / "scenarios";
    if (fs::is_directory(installed / "hardware", ec)) return installed.string();
  }
#ifdef FULLSHARD_DEFAULT_DATA_DIR
  return FULLSHARD_DEFAULT_DATA_DIR;
#else
  return "scenarios";
#endif
}

std::string hardware_profile_dir() { return (fs::path(data_dir()) / "hardware").string(); }

std::vector<std::string> list_hardware_profiles() {
  std::vector<std::string> names;
  for (const auto& f : profile_files()) names.push_back(f.stem().string());
  return names;
}

std::vector<std::pair<std::string, std::string>> list_hardware_profile_aliases() {
  // Reads only each file's "aliases", leniently: a broken profile is reported when it is
  // loaded by name, not when some other name is looked up.
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : profile_files()) {
    json j;
    try {
      j = read_json_input(f.string(), "a hardware profile");
    } catch (const InputError&) {
      continue;
    }
    if (!j.is_object() || !j.contains("aliases") || !j.at("aliases").is_array()) continue;
    for (const auto& a : j.at("aliases"))
      if (a.is_string()) out.emplace_back(lower(a.get<std::string>()), f.stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

HardwareProfile load_hardware_profile_file(const std::string& path) {
  const json j = json_reader::read_json_file(path);
  try {
    return parse_profile(j);
  } catch (const InputError& e) {
    rethrow_in_file(e, path);
  }
}

std::optional<HardwareProfile> find_hardware_profile(const std::string& name_in) {
  const std::string name = lower(name_in);
  if (!is_plain_name(name)) return std::nullopt;
  const fs::path file = fs::path(hardware_profile_dir()) / (name + ".json");
  std::error_code ec;
  if (fs::is_regular_file(file, ec)) {
    HardwareProfile p = load_hardware_profile_file(file.string());
    if (p.name != name)
      throw InputError(file.string() + ": name",
                       "is \"" + p.name + "\" but the file is " + file.filename().string(),
                       "make the name equal the file name without .json");
    return p;
  }
  for (const auto& [alias, profile] : list_hardware_profile_aliases())
    if (alias == name) return find_hardware_profile(profile);
  return std::nullopt;
}

HardwareProfile load_hardware_profile(const std::string& name, const std::string& where) {
  if (auto p = find_hardware_profile(name)) return *std::move(p);
  std::vector<std::string> candidates = list_hardware_profiles();
  std::vector<std::string> alias_text;
  for (const auto& [alias, profile] : list_hardware_profile_aliases()) {
    candidates.push_back(alias);
    alias_text.push_back("'" + alias + "' = '" + profile + "'");
  }
  const std::vector<std::string> known = list_hardware_profiles();
  if (known.empty())
    throw InputError(where, "unknown hardware profile '" + name + "'",
                     "no profiles found in " + hardware_profile_dir() +
                         " (set FULLSHARD_DATA_DIR to the directory holding hardware/)");
  std::string fix;
  if (auto near = json_reader::closest(name, candidates)) fix = "did you mean '" + *near + "'? ";
  fix += "known profiles: " + json_reader::join(known, "'", ", ");
  if (!alias_text.empty()) fix += " (aliases: " + json_reader::join(alias_text, "", ", ") + ")";
  throw InputError(where, "unknown hardware profile '" + name + "'", fix);
}

}  // namespace fullshard
