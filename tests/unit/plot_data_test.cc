// Report JSON -> plot data: parsing (with and without the optional columns), units, ticks,
// stacking, downsampling that keeps the peak, and the errors for bad reports.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/common/error.h"
#include "tools/plot/plot_data.h"

namespace fullshard::plot {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024 * 1024, kMiB = 1024.0 * 1024;

// A report as `fullshard simulate --json` writes it (the keys plots read), two categories.
json sim_report() {
  return json::parse(R"J({
    "scenario": "s", "world_size": 4, "capacity_bytes": 1000, "step_time_s": 0.5, "ok": true,
    "rank_classes": [{"ranks": [0, 1, 2, 3], "peak_allocated_bytes": 300, "peak_reserved_bytes": 512,
                      "peak_time_s": 2.0, "breakdown_at_peak": {"activations": 200, "sharded_params": 100, "temporaries": 0},
                      "in_flight_at_peak": [{"stream": "compute", "name": "layers.0.attention.wq backward_input", "start_s": 1.9, "end_s": 2.1}]}],
    "memory_timeline": [{"class": 0, "ranks": [0, 1, 2, 3],
      "time_s": [0, 1, 2, 3], "allocated_bytes": [100, 200, 300, 100], "reserved_bytes": [512, 512, 512, 512],
      "host_bytes": [0, 0, 0, 0],
      "by_category": {"activations": [0, 100, 200, 0], "sharded_params": [100, 100, 100, 100], "temporaries": [0, 0, 0, 0]},
      "what": ["w (sharded)", "act", "act2", "act"], "event": ["alloc", "alloc", "alloc", "free"],
      "op": ["init", "layers.0.attention.wq", "layers.0.attention.wq backward_input", ""]}]})J");
}

TEST(PlotUnits, BytesPickTheLargestUnitNotAboveTheValue) {
  EXPECT_EQ(byte_unit(0).name, "B");
  EXPECT_EQ(byte_unit(1023).name, "B");
  EXPECT_EQ(byte_unit(1024).name, "KiB");
  EXPECT_EQ(byte_unit(900 * 1024).name, "KiB");
  EXPECT_EQ(byte_unit(5 * kMiB).name, "MiB");
  EXPECT_EQ(byte_unit(1023 * kMiB).name, "MiB");
  EXPECT_EQ(byte_unit(kGiB).name, "GiB");
  EXPECT_EQ(byte_unit(80 * kGiB).name, "GiB");
  EXPECT_DOUBLE_EQ(byte_unit(80 * kGiB).scale, kGiB);
  EXPECT_EQ(format_bytes(27.04 * kGiB), "27.04 GiB");
  EXPECT_EQ(format_bytes(448 * kMiB), "448.0 MiB");
  EXPECT_EQ(format_bytes(640), "640 B");
}

TEST(PlotUnits, TimeSecondsMillisecondsMicroseconds) {
  EXPECT_EQ(time_unit(17.4).name, "s");
  EXPECT_EQ(time_unit(1.0).name, "s");
  EXPECT_EQ(time_unit(0.714).name, "ms");
  EXPECT_EQ(time_unit(0.0023).name, "ms");
  EXPECT_EQ(time_unit(5e-5).name, "\u00b5s");
  EXPECT_DOUBLE_EQ(time_unit(0.0023).scale, 1e-3);
}

TEST(PlotUnits, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(nice_ticks(0, 27.04, 6), (std::vector<double>{0, 5, 10, 15, 20, 25}));
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  auto t = nice_ticks(0.3, 8.7, 8);
  ASSERT_GE(t.size(), 4u);  // 2, 4, 6, 8
  EXPECT_GE(t.front(), 0.3);
  EXPECT_LE(t.back(), 8.7);
  EXPECT_EQ(nice_ticks(2, 2, 5), std::vector<double>{2});  // empty range: no division by zero
}

TEST(PlotNames, ModuleOfOpAndBufferNames) {
  EXPECT_EQ(module_of("layers.3.attention.wq backward_input"), "layers.3.attention.wq");
  EXPECT_EQ(module_of("layers.3.attention.wq.weight (unsharded)"), "layers.3.attention.wq");
  EXPECT_EQ(module_of("layers.3.attention.wq.weight.grad"), "layers.3.attention.wq");
  EXPECT_EQ(module_of("layers.0 all_gather"), "layers.0");
  EXPECT_EQ(module_of("root reduce_scatter_input"), "root");
  EXPECT_EQ(module_of("norm"), "norm");
  EXPECT_EQ(module_of("loss log_softmax"), "loss");
  EXPECT_EQ(module_of("load batch"), "");
  EXPECT_EQ(module_of("ones_like(loss)"), "");
  EXPECT_EQ(module_of(""), "");
}

TEST(PlotParse, SimulationReportWithLabelsAndPeak) {
  Report r = parse_report(sim_report(), "/tmp/predicted.json");
  EXPECT_EQ(r.label, "predicted");  // the file name without .json
  EXPECT_EQ(r.scenario, "s");
  EXPECT_EQ(r.world_size, 4);
  EXPECT_DOUBLE_EQ(r.capacity_bytes, 1000);
  EXPECT_NE(r.summary.find("step 0.500 s"), std::string::npos);
  ASSERT_EQ(r.series.size(), 1u);
  const Series& s = r.series[0];
  EXPECT_EQ(s.label, "ranks 0-3");
  EXPECT_EQ(s.allocated, (std::vector<double>{100, 200, 300, 100}));
  EXPECT_TRUE(s.host.empty());  // all zero: dropped
  // Known categories in stacking order; an all-zero category is dropped.
  EXPECT_EQ(s.categories, (std::vector<std::string>{"sharded_params", "activations"}));
  ASSERT_EQ(s.what.size(), 4u);
  EXPECT_EQ(r.names[static_cast<size_t>(s.what[1])], "act");
  EXPECT_EQ(s.op[3], -1);  // "" is no label
  EXPECT_EQ(s.is_alloc, (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(s.peak_allocated, 300);
  EXPECT_DOUBLE_EQ(s.peak_reserved, 512);
  EXPECT_DOUBLE_EQ(s.peak_time_s, 2.0);
  ASSERT_EQ(s.breakdown_at_peak.size(), 2u);  // zero entries left out, known order
  EXPECT_EQ(s.breakdown_at_peak[0].first, "sharded_params");
  ASSERT_EQ(s.in_flight_at_peak.size(), 1u);
  EXPECT_EQ(s.in_flight_at_peak[0].stream, "compute");
}

TEST(PlotParse, MinimalMeasuredReportDegradesGracefully) {
  // A real run's report may carry only time and allocated bytes, per rank.
  json j = json::parse(R"J({"label": "measured", "memory_timeline": [
      {"rank": 3, "time_s": [0, 0.5, 1.0], "allocated_bytes": [0, 4096, 2048]}]})J");
  Report r = parse_report(j, "m.json");
  EXPECT_EQ(r.label, "measured");
  const Series& s = r.series.at(0);
  EXPECT_EQ(s.label, "rank 3");
  EXPECT_EQ(s.ranks, std::vector<int>{3});
  EXPECT_TRUE(s.reserved.empty());
  EXPECT_TRUE(s.categories.empty());
  EXPECT_TRUE(s.what.empty());
  EXPECT_DOUBLE_EQ(s.peak_allocated, 4096);
  EXPECT_DOUBLE_EQ(s.peak_time_s, 0.5);
  json page = page_data({r});
  EXPECT_FALSE(page["reports"][0]["series"][0].contains("what"));
  EXPECT_FALSE(page["reports"][0]["series"][0].contains("r"));
}

TEST(PlotParse, OptionalSummaryFieldsOfAnotherTypeAreIgnored) {
  // Optional fields are read leniently, as the optional columns are: "ok": 5 or an "oom" whose
  // step is a string once escaped as nlohmann's own type_error (exit 1, a message naming no
  // field). The timeline itself is still checked.
  json j = sim_report();
  j["ok"] = 5;
  j["out_of_memory"] = "yes";
  j["scenario"] = 3;
  j["rank_classes"][0]["in_flight_at_peak"][0]["stream"] = 7;
  j["rank_classes"][0]["oom"] = {
      {"step", "one"}, {"what", 2}, {"category", nullptr}, {"requested_bytes", 1024}};
  j["checkpoint"] = {
      {"played", {{{"after_step", "x"}, {"begin_s", 1}, {"exposed_s", 1}, {"write_end_s", 3}}}}};
  const Report r = parse_report(j, "r.json");
  EXPECT_EQ(r.scenario, "");
  EXPECT_EQ(r.summary.find("OUT OF MEMORY"), std::string::npos) << r.summary;
  EXPECT_EQ(r.summary.find("ok"), std::string::npos) << r.summary;
  EXPECT_EQ(r.series.at(0).in_flight_at_peak.at(0).stream, "");
  EXPECT_NE(r.series.at(0).oom.find("OUT OF MEMORY in step 0 allocating 1.0 KiB for ? (?)"),
            std::string::npos)
      << r.series.at(0).oom;
  ASSERT_EQ(r.checkpoint.size(), 1u);
  EXPECT_EQ(r.checkpoint[0].step, 0);
}

TEST(PlotParse, BadReportsNameThePathTheValueAndTheFix) {
  auto message = [](const json& j) {
    try {
      parse_report(j, "r.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(json::parse(R"J({"scenario": "x"})J")).find("has no memory_timeline"),
            std::string::npos);
  EXPECT_NE(message(json::parse(R"J([1, 2])J")).find("not a report object"), std::string::npos);
  const std::string lengths = message(
      json::parse(R"J({"memory_timeline": [{"time_s": [0, 1, 2], "allocated_bytes": [0, 1]}]})J"));
  EXPECT_NE(lengths.find("memory_timeline[0].allocated_bytes"), std::string::npos) << lengths;
  EXPECT_NE(lengths.find("has 2 values but time_s has 3"), std::string::npos) << lengths;
  const std::string back = message(json::parse(
      R"J({"memory_timeline": [{"time_s": [0, 2, 1], "allocated_bytes": [0, 1, 2]}]})J"));
  EXPECT_NE(back.find("time_s[2]"), std::string::npos) << back;
  EXPECT_NE(back.find("time order"), std::string::npos) << back;
  const std::string type =
      message(json::parse(R"J({"memory_timeline": [{"time_s": [0], "allocated_bytes": ["x"]}]})J"));
  EXPECT_NE(type.find("allocated_bytes[0]"), std::string::npos) << type;
  EXPECT_NE(
      message(json::parse(R"J({"memory_timeline": [{"time_s": [0]}]})J")).find("allocated_bytes"),
      std::string::npos);
  EXPECT_THROW(load_report("/nonexistent/report.json"), InputError);
}

TEST(PlotStack, CumulativeTopsSkipHiddenCategories) {
  Series s;
  s.time_s = {0, 1};
  s.categories = {"a", "b", "c"};
  s.by_category = {{1, 2}, {10, 20}, {100, 200}};
  auto all = stack(s, {});
  EXPECT_EQ(all[0], (std::vector<double>{1, 2}));
  EXPECT_EQ(all[1], (std::vector<double>{11, 22}));
  EXPECT_EQ(all[2], (std::vector<double>{111, 222}));
  auto hidden = stack(s, {true, false, true});
  EXPECT_EQ(hidden[1], hidden[0]);  // draws as nothing
  EXPECT_EQ(hidden[2], (std::vector<double>{101, 202}));
}

// A long timeline: a random walk with one short spike; `labels` marks each point's index.
Series long_series(size_t n, size_t spike_at) {
  Series s;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> step(-3, 3);
  double v = 1e6;
  s.categories = {"activations", "temporaries"};
  s.by_category.resize(2);
  for (size_t i = 0; i < n; ++i) {
    v = std::max(0.0, v + 512.0 * step(rng));
    const double spike = i == spike_at ? 5e8 : 0;
    s.time_s.push_back(1e-4 * static_cast<double>(i / 3));  // equal times happen
    s.allocated.push_back(v + spike);
    s.reserved.push_back(2e9 - (i == n / 3 ? 0 : 1e3 * static_cast<double>(i % 5)));
    s.by_category[0].push_back(v);
    s.by_category[1].push_back(spike);
    s.what.push_back(static_cast<int32_t>(i));
    s.op.push_back(static_cast<int32_t>(i));
    s.is_alloc.push_back(i % 2);
  }
  return s;
}

void expect_consistent_subset(const Series& d, const Series& orig) {
  ASSERT_EQ(d.allocated.size(), d.time_s.size());
  ASSERT_EQ(d.reserved.size(), d.time_s.size());
  ASSERT_EQ(d.by_category[1].size(), d.time_s.size());
  ASSERT_EQ(d.what.size(), d.time_s.size());
  for (size_t i = 0; i < d.time_s.size(); ++i) {
    const size_t k = static_cast<size_t>(d.what[i]);  // original index, carried by the label
    if (i) {
      ASSERT_LT(d.what[i - 1], d.what[i]) << "points out of order";
    }
    ASSERT_EQ(d.time_s[i], orig.time_s[k]);
    ASSERT_EQ(d.allocated[i], orig.allocated[k]);
    ASSERT_EQ(d.by_category[0][i], orig.by_category[0][k]);
    ASSERT_EQ(d.op[i], orig.op[k]);
    ASSERT_EQ(d.is_alloc[i], orig.is_alloc[k]);
  }
  EXPECT_EQ(d.what.front(), 0);
}

TEST(PlotDownsample, KeepsThePeakAndTheEnvelope) {
  const size_t n = 1'000'000, spike = 777'777;
  const Series orig = long_series(n, spike);
  Series d = orig;
  downsample(d, 4000);
  EXPECT_LE(d.time_s.size(), 4004u);
  EXPECT_GE(d.time_s.size(), 3000u);
  expect_consistent_subset(d, orig);
  EXPECT_EQ(d.what.back(), static_cast<int32_t>(n - 1));
  // The single-point spike survives, at its time, with its breakdown.
  const size_t p = peak_index(d);
  EXPECT_EQ(d.what[p], static_cast<int32_t>(spike));
  EXPECT_EQ(d.allocated[p], orig.allocated[spike]);
  EXPECT_EQ(d.by_category[1][p], 5e8);
  // The reserved peak is kept too, and the lowest point.
  EXPECT_EQ(*std::max_element(d.reserved.begin(), d.reserved.end()), 2e9);
  EXPECT_EQ(*std::min_element(d.allocated.begin(), d.allocated.end()),
            *std::min_element(orig.allocated.begin(), orig.allocated.end()));
  Series small = long_series(100, 50);
  downsample(small, 4000);  // already short: untouched
  EXPECT_EQ(small.time_s.size(), 100u);
}

TEST(PlotDownsample, PerPixelColumnKeepsThePeak) {
  const size_t n = 300'000, spike = 123'457;
  const Series orig = long_series(n, spike);
  Series d = orig;
  downsample_by_time(d, orig.time_s.back(), 900);
  EXPECT_LE(d.time_s.size(), 4 * 900u + 2);
  expect_consistent_subset(d, orig);
  EXPECT_EQ(d.what[peak_index(d)], static_cast<int32_t>(spike));
  EXPECT_EQ(d.what.back(), static_cast<int32_t>(n - 1));
}

TEST(PlotMatch, SeriesOfAnotherReportByRankThenPosition) {
  Report r;
  r.series.resize(3);
  r.series[0].ranks = {0, 1};
  r.series[1].ranks = {2};
  r.series[2].ranks = {3};
  Series s;
  s.ranks = {2, 3};
  EXPECT_EQ(matching_series(r, s, 0), 1u);
  s.ranks = {9};
  EXPECT_EQ(matching_series(r, s, 2), 2u);
  s.ranks = {};
  EXPECT_EQ(matching_series(r, s, 5), std::nullopt);
}

TEST(PlotPageData, CompactColumns) {
  Report r = parse_report(sim_report(), "p.json");
  json page = page_data({r});
  const json& s = page["reports"][0]["series"][0];
  EXPECT_EQ(s["t"], json::parse("[0, 1000000000, 2000000000, 3000000000]"));  // nanoseconds
  EXPECT_EQ(s["a"], json::parse("[100, 200, 300, 100]"));
  EXPECT_EQ(s["ev"], "aaaf");
  EXPECT_EQ(s["cats"][0]["key"], "sharded_params");
  EXPECT_EQ(s["cats"][0]["color"], category_color("sharded_params", 0));
  const json& names = page["reports"][0]["names"];
  const json& modules = page["reports"][0]["modules"];
  ASSERT_EQ(names.size(), modules.size());
  EXPECT_EQ(modules[s["op"][2].get<size_t>()], "layers.0.attention.wq");
  EXPECT_EQ(s["peak"]["in_flight"][0]["module"], "layers.0.attention.wq");
}

// A mixture-of-experts class: moe_at_peak, all-to-all spans and the routed-tokens column reach
// the series and the page (docs/plots.md, "Mixture of experts").
TEST(PlotParse, MixtureOfExpertsLineLaneAndPeakParts) {
  json j = sim_report();
  j["rank_classes"][0]["moe_at_peak"] = {{"expert_params", 100},
                                         {"expert_grads", 0},
                                         {"expert_optimizer_state", 0},
                                         {"routed_tokens", 150}};
  j["rank_classes"][0]["all_to_all_spans"] = json::parse(R"J([
      {"stream": "compute", "name": "layers.0.moe.experts.dispatch all_to_all", "start_s": 1.0, "end_s": 1.25},
      {"stream": "compute", "name": "layers.0.moe.experts.combine all_to_all", "start_s": 1.5, "end_s": 1.75}])J");
  j["memory_timeline"][0]["routed_tokens_bytes"] = {0, 100, 150, 0};
  const Report r = parse_report(j, "moe.json");
  const Series& s = r.series[0];
  EXPECT_EQ(s.routed, (std::vector<double>{0, 100, 150, 0}));
  ASSERT_EQ(s.moe_at_peak.size(), 2u);  // zero parts left out, in moe_part_key order
  EXPECT_EQ(s.moe_at_peak[0], (std::pair<std::string, double>{"expert_params", 100}));
  EXPECT_EQ(s.moe_at_peak[1], (std::pair<std::string, double>{"routed_tokens", 150}));
  ASSERT_EQ(s.all_to_all.size(), 2u);
  EXPECT_EQ(s.all_to_all[1].name, "layers.0.moe.experts.combine all_to_all");
  const json page = page_data({r});
  const json& ps = page["reports"][0]["series"][0];
  EXPECT_EQ(ps["rt"], json::parse("[0, 100, 150, 0]"));
  EXPECT_EQ(ps["a2a"][0],
            json::parse(R"J([1.0, 1.25, "layers.0.moe.experts.dispatch all_to_all"])J"));
  EXPECT_EQ(ps["peak"]["moe"][1], json::parse(R"J(["routed_tokens", 150])J"));
  // A dense report has none of the three, and neither does its page.
  const Report dense = parse_report(sim_report(), "dense.json");
  EXPECT_TRUE(dense.series[0].routed.empty());
  const json dp = page_data({dense})["reports"][0]["series"][0];
  EXPECT_FALSE(dp.contains("rt"));
  EXPECT_FALSE(dp.contains("a2a"));
  EXPECT_FALSE(dp["peak"].contains("moe"));
  // Downsampling keeps the routed column beside the others.
  Series big;
  for (int i = 0; i < 1000; ++i) {
    big.time_s.push_back(i);
    big.allocated.push_back(i % 7);
    big.routed.push_back(i % 7 == 6 ? 5 : 0);
  }
  downsample(big, 40);
  ASSERT_EQ(big.routed.size(), big.time_s.size());
  for (size_t i = 0; i < big.time_s.size(); ++i)
    EXPECT_EQ(big.routed[i], big.allocated[i] == 6 ? 5 : 0) << "point " << i;
}

}  // namespace
}  // namespace fullshard::plot
