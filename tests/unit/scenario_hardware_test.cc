// Hardware profiles as the time model reads them: the figures every shipped profile gives (with a
// source each), efficiency step tables, and the scenario's overrides of any figure, per-rank
// speed factors and host threads, each bad value a one-line InputError at its JSON path.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/hardware_profile.h"
#include "core/scenario/scenario.h"

namespace fullshard {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json h100x16() {
  return json::parse(R"({
    "model": "tiny-llama",
    "training": {"seq_len": 64},
    "hardware": {"profile": "h100-sxm-80gb", "nodes": 2}
  })");
}

template <typename Fn>
void expect_input_error(Fn fn, const std::string& where, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError at " << where;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.where(), where) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "missing '" << p << "' in: " << what;
  }
}

void expect_error(const json& j, const std::string& where, const std::vector<std::string>& parts) {
  expect_input_error([&] { parse_scenario(j); }, where, parts);
}

TEST(HardwareProfileFigures, EveryShippedProfileCitesEveryFigure) {
  for (const auto& name : list_hardware_profiles()) {
    SCOPED_TRACE(name);
    const HardwareProfile p = load_hardware_profile(name);
    for (const auto& f : hardware_profile_figures())
      EXPECT_NE(p.source.find(f + ": "), std::string::npos) << f;
    EXPECT_GT(p.intra_node_bus_bandwidth, 0);
    EXPECT_GT(p.network_bus_bandwidth, 0);
    EXPECT_LE(p.network_bus_bandwidth, p.network_bandwidth);  // NCCL never beats the line rate
    EXPECT_LE(p.pageable_copy_bandwidth, p.pinned_copy_bandwidth);
    EXPECT_LE(p.pinned_copy_bandwidth, p.pcie_bandwidth);
    for (const EfficiencyTable* t :
         {&p.matmul_efficiency, &p.attention_efficiency, &p.attention_backward_efficiency,
          &p.attention_head_dim_efficiency, &p.vector_efficiency, &p.memory_efficiency}) {
      ASSERT_FALSE(t->rows.empty());
      EXPECT_EQ(t->rows.back().first, 0);
    }
  }
}

// convert_memory_factor came after profiles were written by users (calibrate's output, copies
// of shipped files): a file without it loads, priced as before (1); a file that gives it cites
// it like every other figure.
TEST(HardwareProfileFigures, ConvertFactorIsOptionalButCitedWhenGiven) {
  json j = json::parse(read_text(hardware_profile_dir() + "/h200-141gb.json"));
  ASSERT_TRUE(j.contains("convert_memory_factor"));
  const auto path = (std::filesystem::temp_directory_path() /
                     ("convert-factor-" + std::to_string(::getpid()) + ".json"))
                        .string();
  auto load = [&](const json& profile) {
    std::ofstream(path) << profile.dump();
    return load_hardware_profile_file(path);
  };
  json without = j;
  without.erase("convert_memory_factor");
  without["sources"].erase("convert_memory_factor");
  EXPECT_EQ(load(without).convert_memory_factor, 1.0);
  json half = j;
  half["convert_memory_factor"] = 0.5;
  EXPECT_EQ(load(half).convert_memory_factor, 0.5);
  half["sources"].erase("convert_memory_factor");
  expect_input_error([&] { load(half); }, path + ": sources.convert_memory_factor",
                     {"is missing", "cite"});
  std::filesystem::remove(path);
}

TEST(HardwareProfileFigures, ShippedValues) {
  const HardwareProfile h100 = load_hardware_profile("h100");
  EXPECT_EQ(h100.compute_capability, 90);
  EXPECT_TRUE(h100.nvls);
  EXPECT_DOUBLE_EQ(h100.nvls_efficiency, 0.85);
  EXPECT_DOUBLE_EQ(h100.intra_node_bus_bandwidth, 370.8e9);
  EXPECT_EQ(h100.intra_node_link, IntraNodeLink::kNvlink);
  EXPECT_EQ(h100.host_cpu, HostCpu::kIntel);
  EXPECT_EQ(h100.host_link, HostLink::kPcie5);
  EXPECT_DOUBLE_EQ(h100.matmul_efficiency.at(200e9), 0.83);
  EXPECT_DOUBLE_EQ(h100.attention_efficiency.at(8192), 0.337);  // thresholds are inclusive
  EXPECT_DOUBLE_EQ(h100.attention_efficiency.at(8191), 0.323);
  EXPECT_DOUBLE_EQ(h100.attention_backward_efficiency.at(100), 0.134);
  EXPECT_DOUBLE_EQ(h100.sustained_clock_ratio, 0.85);
  EXPECT_DOUBLE_EQ(h100.memory_efficiency.at(50e6), 0.75);
  const HardwareProfile a100 = load_hardware_profile("a100");
  EXPECT_FALSE(a100.nvls);
  EXPECT_EQ(a100.host_cpu, HostCpu::kAmd);
  EXPECT_EQ(a100.host_link, HostLink::kPcie4);
  EXPECT_EQ(load_hardware_profile("gh200").host_link, HostLink::kNvlinkC2C);
  EXPECT_FALSE(load_hardware_profile("gh200").nvls);
  EXPECT_DOUBLE_EQ(load_hardware_profile("b200").nvls_efficiency, 0.74);
  EXPECT_STREQ(host_link_name(HostLink::kNvlinkC2C), "nvlink-c2c");
  EXPECT_STREQ(intra_node_link_name(IntraNodeLink::kPcie), "pcie");
  EXPECT_STREQ(host_cpu_name(HostCpu::kArm), "arm");
}

TEST(HardwareOverrides, AnyFigureFromTheScenario) {
  json j = h100x16();
  j["hardware"]["network_bandwidth"] = 12.5e9;
  j["hardware"]["network_bus_bandwidth"] = 11e9;
  j["hardware"]["nvls"] = false;
  j["hardware"]["matmul_efficiency"] = json::parse("[[1e9, 0.8], [0, 0.4]]");
  j["hardware"]["host_link"] = "pcie4";
  j["hardware"]["gpus_per_node"] = 4;
  j["hardware"]["nodes"] = 4;
  const HardwareOptions h = parse_scenario(j).hardware;
  EXPECT_DOUBLE_EQ(h.device.network_bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(h.device.network_bus_bandwidth, 11e9);
  EXPECT_FALSE(h.device.nvls);
  EXPECT_DOUBLE_EQ(h.device.matmul_efficiency.at(5e9), 0.8);
  EXPECT_EQ(h.device.host_link, HostLink::kPcie4);
  EXPECT_EQ(h.device.gpus_per_node, 4);  // the layout's ranks per node
  EXPECT_NE(h.device.source.find("network_bandwidth: set by the scenario"), std::string::npos);
  EXPECT_EQ(h.overridden,
            (std::vector<std::string>{"matmul_efficiency", "nvls", "network_bandwidth",
                                      "network_bus_bandwidth", "host_link"}));
  EXPECT_DOUBLE_EQ(h.device.peak_flops_bf16, 989.4e12);  // untouched figures stay the profile's
}

TEST(HardwareOverrides, BadValuesNameTheirPath) {
  json j = h100x16();
  j["hardware"]["network_bandwidth"] = 0;
  expect_error(j, "hardware.network_bandwidth", {"is 0", "50e9"});
  j = h100x16();
  j["hardware"]["matmul_efficiency"] = json::parse("[[1e9, 0.8], [2e9, 0.4], [0, 0.1]]");
  expect_error(j, "hardware.matmul_efficiency[1][0]", {"not below the previous threshold"});
  j["hardware"]["matmul_efficiency"] = json::parse("[[1e9, 0.8]]");
  expect_error(j, "hardware.matmul_efficiency[0][0]", {"threshold is 0"});
  j["hardware"]["matmul_efficiency"] = json::parse("[[0, 1.5]]");
  expect_error(j, "hardware.matmul_efficiency[0][1]", {"1.5"});
  j["hardware"]["matmul_efficiency"] = 0.9;
  expect_error(j, "hardware.matmul_efficiency", {"not a non-empty array", "[[128e9, 0.95]"});
  j = h100x16();
  j["hardware"]["host_link"] = "pcie7";
  expect_error(j, "hardware.host_link", {"\"pcie7\"", "did you mean", "\"nvlink-c2c\""});
  j = h100x16();
  j["hardware"]["nvls_efficiency"] = 0;
  expect_error(j, "hardware.nvls_efficiency", {"is 0 while nvls is true", "0.85"});
  j = h100x16();
  j["hardware"]["overlap_slowdown_nvlink"] = 1;
  expect_error(j, "hardware.overlap_slowdown_nvlink", {"is 1"});
  j = h100x16();
  j["hardware"]["network_bandwith"] = 1e9;
  expect_error(j, "hardware.network_bandwith",
               {"network_bandwith", "did you mean 'network_bandwidth'?"});
}

TEST(HardwareOverrides, FiguresThatWouldMakeATimeInfiniteAreRefused) {
  // NOTE [Figure bounds] (core/scenario/hardware_profile.cc): each of these once played to an
  // infinite kernel time (an internal error) or an infinite step (a report with a null step time).
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"peak_flops_fp32", 1e-320, "must be >= 1"},
      {"hbm_bandwidth", 0.5, "must be >= 1"},
      {"intra_node_bus_bandwidth", 1e-300, "must be >= 1"},
      {"host_core_flops", 5e-324, "must be >= 1"},
      {"launch_overhead_s", 1e308, "must be >= 0 and <= 1"},
      {"kernel_gap_s", 2, "must be >= 0 and <= 1"},
      {"matmul_small_dim", 1e300, "must be >= 0 and <= 65536"},
      {"sustained_clock_ratio", 1e-320, "must be >= 0.001 and <= 1"},
      {"norm_memory_efficiency", 1e-5, "must be >= 0.001 and <= 1"},
      {"nvls_efficiency", 1e-9, "is 1e-09 while nvls is true, below 0.001"},
  };
  for (const auto& [figure, value, problem] : cases) {
    SCOPED_TRACE(figure);
    json j = h100x16();
    j["hardware"][figure] = value;
    expect_error(j, "hardware." + figure, {problem});
  }
  json j = h100x16();
  j["hardware"]["matmul_efficiency"] = json::parse("[[1e9, 0.8], [0, 5e-324]]");
  expect_error(j, "hardware.matmul_efficiency[1][1]", {"is 5e-324", "must be >= 0.001 and <= 1"});
  j = h100x16();
  j["hardware"]["rank_speed"] = json::parse(R"([{"rank": 1, "speed": 1e-320}])");
  expect_error(j, "hardware.rank_speed[0].speed", {"must be >= 0.001 and <= 1000"});
  j = h100x16();
  j["training"]["checkpoint"] = json::parse(R"({"every": 1, "storage_write_bandwidth": 1e-320})");
  expect_error(j, "training.checkpoint.storage_write_bandwidth", {"must be >= 1"});
  // The bounds themselves are accepted.
  j = h100x16();
  j["hardware"]["peak_flops_fp32"] = kMinFigureRate;
  j["hardware"]["launch_overhead_s"] = 1;
  j["hardware"]["matmul_small_dim"] = 65536;
  j["hardware"]["sustained_clock_ratio"] = kMinFigureFraction;
  j["hardware"]["matmul_efficiency"] = json::parse("[[0, 0.001]]");
  j["hardware"]["rank_speed"] = json::parse(R"([{"rank": 1, "speed": 0.001}])");
  EXPECT_EQ(parse_scenario(j).hardware.device.sustained_clock_ratio, kMinFigureFraction);
}

TEST(HardwareOverrides, RankSpeedAndHostThreads) {
  json j = h100x16();
  EXPECT_TRUE(parse_scenario(j).hardware.rank_speed.empty());
  EXPECT_EQ(parse_scenario(j).hardware.host_threads_per_rank, 1);
  j["hardware"]["rank_speed"] =
      json::parse(R"([{"rank": 3, "speed": 0.5}, {"rank": 15, "speed": 1.25}])");
  j["hardware"]["host_threads_per_rank"] = 4;
  const HardwareOptions h = parse_scenario(j).hardware;
  EXPECT_EQ(h.rank_speed, (std::map<int, double>{{3, 0.5}, {15, 1.25}}));
  EXPECT_EQ(h.host_threads_per_rank, 4);

  j["hardware"]["rank_speed"] = json::parse(R"([{"rank": 16, "speed": 0.5}])");
  expect_error(j, "hardware.rank_speed[0].rank", {"is 16", "15"});
  j["hardware"]["rank_speed"] = json::parse(R"([{"rank": 1, "speed": 0}])");
  expect_error(j, "hardware.rank_speed[0].speed", {"is 0"});
  j["hardware"]["rank_speed"] =
      json::parse(R"([{"rank": 1, "speed": 0.5}, {"rank": 1, "speed": 0.7}])");
  expect_error(j, "hardware.rank_speed[1].rank", {"given twice"});
  j["hardware"]["rank_speed"] = json::parse(R"([{"rank": 1}])");
  expect_error(j, "hardware.rank_speed[0].speed", {"is missing"});
  j["hardware"]["rank_speed"] = json::parse(R"([{"rank": 1, "speed": 0.5, "sped": 1}])");
  expect_error(j, "hardware.rank_speed[0].sped", {"sped", "did you mean 'speed'?"});
  j["hardware"]["rank_speed"] = json::parse(R"({"1": 0.5})");
  expect_error(j, "hardware.rank_speed", {"not an array"});
}

}  // namespace
}  // namespace fullshard
