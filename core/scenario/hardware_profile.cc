#include "core/scenario/hardware_profile.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"

namespace fullshard {
namespace {

namespace fs = std::filesystem;
namespace jr = json_reader;
using nlohmann::json;

// The figures a profile must give, each with an entry in "sources".
const std::vector<std::string> kFigures = {
    "memory_bytes",    "non_allocator_bytes", "peak_flops_bf16",   "peak_flops_fp16",
    "peak_flops_fp32", "peak_flops_tf32",     "hbm_bandwidth",     "nvlink_bandwidth",
    "network_bandwidth", "pcie_bandwidth",    "gpus_per_node",
};

std::vector<std::string> known_fields() {
  std::vector<std::string> k = {"name", "description", "aliases", "sources"};
  k.insert(k.end(), kFigures.begin(), kFigures.end());
  return k;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Profile names are file stems: keep them to a safe alphabet so a name can never walk out of
// the hardware directory.
bool is_plain_name(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  }) && s.find("..") == std::string::npos;
}

// Errors inside a profile file name the file first: "h100.json: memory_bytes: ...".
[[noreturn]] void rethrow_in_file(const InputError& e, const std::string& file) {
  const std::string what = e.what();
  const std::string rest = what.size() > e.where().size() + 2 ? what.substr(e.where().size() + 2) : what;
  throw InputError(e.where().empty() ? file : file + ": " + e.where(), rest, "");
}

HardwareProfile parse_profile(const json& j) {
  jr::require_object(j, "", "{\"name\": \"h100-sxm-80gb\", \"memory_bytes\": ...}");
  jr::reject_unknown_fields(j, "", known_fields());
  for (const auto& f : known_fields())
    if (f != "aliases" && f != "description")
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
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  p.memory_bytes = static_cast<uint64_t>(
      jr::get_int(j.at("memory_bytes"), "memory_bytes", 1, kMax, "85520809984"));
  p.non_allocator_bytes = static_cast<uint64_t>(
      jr::get_int(j.at("non_allocator_bytes"), "non_allocator_bytes", 0, kMax, "2103443456"));
  if (p.non_allocator_bytes >= p.memory_bytes)
    throw InputError("non_allocator_bytes",
                     "is " + std::to_string(p.non_allocator_bytes) + ", not less than memory_bytes " +
                         std::to_string(p.memory_bytes),
                     "the allocator needs some memory: give a smaller value");
  const double inf = std::numeric_limits<double>::infinity();
  auto rate = [&](const char* key, const char* example) {
    return jr::get_number(j.at(key), key, 0, false, inf, false, example);
  };
  p.peak_flops_bf16 = rate("peak_flops_bf16", "989.4e12");
  p.peak_flops_fp16 = rate("peak_flops_fp16", "989.4e12");
  p.peak_flops_fp32 = rate("peak_flops_fp32", "66.9e12");
  p.peak_flops_tf32 = rate("peak_flops_tf32", "494.7e12");
  p.hbm_bandwidth = rate("hbm_bandwidth", "3.35e12");
  p.nvlink_bandwidth = rate("nvlink_bandwidth", "450e9");
  p.network_bandwidth = rate("network_bandwidth", "50e9");
  p.pcie_bandwidth = rate("pcie_bandwidth", "64e9");
  p.gpus_per_node = static_cast<int>(jr::get_int(j.at("gpus_per_node"), "gpus_per_node", 1, 1 << 20, "8"));

  // NOTE [Cited figures]: a profile is only as good as its numbers, so every figure must say
  // where it comes from (a datasheet, a measurement) in "sources".
  const json& sources = j.at("sources");
  jr::require_object(sources, "sources", "{\"memory_bytes\": \"NVIDIA H100 datasheet: 80 GB\"}");
  jr::reject_unknown_fields(sources, "sources", kFigures);
  for (const auto& f : kFigures) {
    jr::require_field(sources, "sources", f, "cite where the value of " + f + " comes from");
    const std::string cite = jr::get_string(sources.at(f), jr::child_path("sources", f),
                                            "\"NVIDIA H100 datasheet\"");
    if (cite.empty())
      throw InputError(jr::child_path("sources", f), "is empty", "cite where the figure comes from");
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

std::string data_dir() {
  if (const char* env = std::getenv("FULLSHARD_DATA_DIR"); env != nullptr && *env != '\0')
    return env;
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
    std::ifstream in(f);
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
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
