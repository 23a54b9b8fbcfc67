// `fullshard simulate --trace`: the Chrome Trace Event file is valid (required fields per
// phase, per-thread timestamps never decrease, stream slices do not overlap, every flow has
// both ends) and says what the issue asks (processes per rank class, threads per stream,
// collectives with bytes / group / algorithm, memory counters that reach the peak). Also the
// report's timeline labels and ops in flight at the peak that the plots read.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "simulator/report.h"
#include "simulator/trace.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

struct Traced {
  sim::SimulationReport report;
  json trace;
};

Traced traced(const TinyOptions& o, bool all_ranks) {
  sim::SimulateOptions so;
  so.all_ranks = all_ranks;
  std::string text;
  so.on_played = [&](const sim::PlayedRun& run) {
    std::ostringstream out;
    sim::write_chrome_trace(run, out);
    text = out.str();
  };
  Traced t;
  t.report = sim::simulate_scenario(tiny_scenario(o), so);
  EXPECT_TRUE(t.report.problems.empty()) << problems_text(t.report);
  t.trace = json::parse(text);  // throws (fails the test) when it is not JSON
  return t;
}

using ByPhase = std::map<std::string, std::vector<json>>;

// Checks the Trace Event format rules and collects the events by phase.
void validate(const json& trace, ByPhase& by_ph) {
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  std::map<std::pair<int, int>, double> last_ts;        // per thread
  std::map<std::pair<int, int>, double> stream_end;     // per thread: end of the last X
  std::map<uint64_t, std::pair<double, double>> flows;  // id -> (s ts, f ts)
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e;
    const std::string ph = e["ph"];
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
    by_ph[ph].push_back(e);
    if (ph == "M") {
      ASSERT_TRUE(e.contains("args") && e["args"].is_object()) << e;
      continue;
    }
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e;
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    const double ts = e["ts"];
    ASSERT_GE(ts, 0) << e;
    const std::pair<int, int> th{e["pid"], ph == "C" ? -1 : e["tid"].get<int>()};
    auto it = last_ts.find(th);
    if (it != last_ts.end()) {
      ASSERT_GE(ts, it->second) << "timestamps go back on a thread: " << e;
    }
    last_ts[th] = ts;
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e;
      ASSERT_GE(e["dur"].get<double>(), 0) << e;
      if (th.second > 0) {  // a stream runs one op at a time
        auto end = stream_end.find(th);
        if (end != stream_end.end()) {
          ASSERT_GE(ts, end->second - 1e-6) << "overlapping slices on a stream: " << e;
        }
        stream_end[th] = ts + e["dur"].get<double>();
      }
    } else if (ph == "C") {
      ASSERT_TRUE(e.contains("args") && e["args"].is_object() && !e["args"].empty()) << e;
      for (const auto& [k, v] : e["args"].items()) ASSERT_TRUE(v.is_number()) << k;
    } else if (ph == "s" || ph == "f") {
      ASSERT_TRUE(e.contains("id") && e.contains("cat")) << e;
      auto& f = flows[e["id"].get<uint64_t>()];
      (ph == "s" ? f.first : f.second) = ts + 1;  // +1: 0 means "missing"
    } else if (ph == "i") {
      ASSERT_TRUE(e.contains("s")) << e;
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  for (const auto& [id, f] : flows) {
    EXPECT_GT(f.first, 0) << "flow " << id << " has no start";
    EXPECT_GT(f.second, 0) << "flow " << id << " has no end";
    EXPECT_LE(f.first, f.second) << "flow " << id << " goes back in time";
  }
}

TEST(ChromeTrace, ValidAndComplete) {
  TinyOptions o;
  o.mesh = {4};
  Traced t = traced(o, false);
  ByPhase ev;
  validate(t.trace, ev);
  // One process per rank class (all 4 ranks have the same program here: one class).
  std::set<std::string> processes, threads;
  for (const json& m : ev["M"]) {
    if (m["name"] == "process_name") processes.insert(m["args"]["name"].get<std::string>());
    if (m["name"] == "thread_name") threads.insert(m["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(processes, (std::set<std::string>{"ranks 0-3"}));
  for (const char* s : {"host", "compute", "all_gather_copy_in", "all_gather", "reduce_scatter"})
    EXPECT_TRUE(threads.count(s)) << s;
  // Compute ops, copies and collectives with their args.
  std::map<std::string, int> cats;
  for (const json& x : ev["X"]) ++cats[x.value("cat", "")];
  EXPECT_GT(cats["compute"], 0);
  EXPECT_GT(cats["copy"], 0);
  EXPECT_GT(cats["collective"], 0);
  EXPECT_GT(cats["step"], 0);
  bool saw_rs = false;
  for (const json& x : ev["X"]) {
    if (x["cat"] != "collective") continue;
    const json& a = x["args"];
    EXPECT_GT(a["bytes"].get<uint64_t>(), 0u) << x;
    EXPECT_EQ(a["group"], "shard") << x;
    EXPECT_EQ(a["group_size"], 4) << x;
    EXPECT_EQ(a["algorithm"], "ring") << x;  // the placeholder cost model's choice
    if (a["collective"] == "reduce_scatter") {
      saw_rs = true;
      EXPECT_TRUE(a.contains("reduce_op")) << x;
    }
  }
  EXPECT_TRUE(saw_rs);
  // Event waits: flows between streams; phase markers as instants.
  EXPECT_GT(ev["s"].size(), 0u);
  EXPECT_EQ(ev["s"].size(), ev["f"].size());
  EXPECT_GT(ev["i"].size(), 0u);
  // Memory counters: allocated reaches the report's peak.
  double max_alloc = 0;
  bool by_category = false;
  for (const json& c : ev["C"]) {
    if (c["name"] == "memory")
      max_alloc = std::max(max_alloc, c["args"]["allocated_bytes"].get<double>());
    if (c["name"] == "memory by category") by_category = true;
  }
  EXPECT_EQ(max_alloc, static_cast<double>(t.report.classes[0].peak_allocated_bytes));
  EXPECT_TRUE(by_category);
}

TEST(ChromeTrace, EveryRankIsAProcessWithRanksAll) {
  TinyOptions o;
  o.mesh = {2};
  Traced t = traced(o, true);
  ByPhase ev;
  validate(t.trace, ev);
  std::set<int> pids;
  for (const json& x : ev["X"]) pids.insert(x["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{1, 2}));  // 1 + rank
}

TEST(TimelineLabels, ReportCarriesWhatOpEventAndInFlight) {
  TinyOptions o;
  auto r = sim::simulate_scenario(tiny_scenario(o));
  json j = sim::report_json(r);
  const json& tl = j["memory_timeline"][0];
  const size_t n = tl["time_s"].size();
  ASSERT_GT(n, 10u);
  ASSERT_EQ(tl["what"].size(), n);
  ASSERT_EQ(tl["op"].size(), n);
  ASSERT_EQ(tl["event"].size(), n);
  // The first allocations are parameters, named; alloc / free alternate with the program.
  EXPECT_NE(tl["what"][0].get<std::string>(), "");
  std::set<std::string> events(tl["event"].begin(), tl["event"].end());
  EXPECT_EQ(events, (std::set<std::string>{"alloc", "free"}));
  // The peak point names the op the device starts then, which is in flight at the peak.
  const json& c = j["rank_classes"][0];
  ASSERT_FALSE(c["in_flight_at_peak"].empty());
  for (const json& f : c["in_flight_at_peak"]) {
    EXPECT_LE(f["start_s"].get<double>(), c["peak_time_s"].get<double>());
    EXPECT_GT(f["end_s"].get<double>(), c["peak_time_s"].get<double>());
  }
  // Existing keys unchanged.
  for (const char* k : {"class", "ranks", "time_s", "allocated_bytes", "reserved_bytes",
                        "host_bytes", "by_category"})
    EXPECT_TRUE(tl.contains(k)) << k;
}

}  // namespace
