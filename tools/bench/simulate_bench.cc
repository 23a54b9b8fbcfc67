// Simulator speed (issue 3's targets): one training step of Llama 3.1 70B on 1,024 H100s,
// simulated by rank class and with every rank; and the event engine's throughput.
//   build/bin/bench_simulate [--benchmark_filter=...]
// Build Release (tools/demo.sh's build/) to read the figures. Each benchmark loads
// scenarios/llama3.1-70b-fsdp1024-h100.json with training.steps = 1.
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>

#include "core/scenario/scenario.h"
#include "simulator/cost/hardware_cost_model.h"
#include "simulator/simulate.h"

namespace {

using namespace fullshard;

Scenario one_step(const std::string& name) {
  const std::string dir = std::string(FULLSHARD_SOURCE_DIR) + "/scenarios";
  std::ifstream in(dir + "/" + name + ".json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["training"]["steps"] = 1;
  j["name"] = name;
  return parse_scenario(j, dir);
}

// fullshard simulate as the CLI runs it: record the host programs, play them, build the report.
void simulate(benchmark::State& state, const std::string& name, bool all_ranks) {
  const Scenario s = one_step(name);
  sim::SimulateOptions o;
  o.all_ranks = all_ranks;
  uint64_t events = 0;
  for (auto _ : state) {
    const sim::SimulationReport r = sim::simulate_scenario(s, o);
    if (!r.ok()) state.SkipWithError("simulation reported problems");
    events = r.events_processed;
    benchmark::DoNotOptimize(r.step_time_s);
  }
  state.counters["ranks"] = s.world_size();
  state.counters["events"] = static_cast<double>(events);
}

void BM_Simulate70BFsdp1024ByClass(benchmark::State& state) {
  simulate(state, "llama3.1-70b-fsdp1024-h100", false);
}
BENCHMARK(BM_Simulate70BFsdp1024ByClass)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);

void BM_Simulate70BFsdp1024EveryRank(benchmark::State& state) {
  simulate(state, "llama3.1-70b-fsdp1024-h100", true);
}
BENCHMARK(BM_Simulate70BFsdp1024EveryRank)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

void BM_Simulate70BHsdp8x128EveryRank(benchmark::State& state) {
  simulate(state, "llama3.1-70b-hsdp8x128-h100", true);
}
BENCHMARK(BM_Simulate70BHsdp8x128EveryRank)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

// Scaling with the world size (issue 13: near-linear, not quadratic): the same 70B FSDP step on
// 1,024 .. 65,536 ranks (nodes of 8), by rank class. Compare the times as ratios of one run.
void BM_Simulate70BFsdpByClassWorld(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const std::string dir = std::string(FULLSHARD_SOURCE_DIR) + "/scenarios";
  std::ifstream in(dir + "/llama3.1-70b-fsdp1024-h100.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["training"]["steps"] = 1;
  j["fsdp"]["mesh"]["shape"] = {world};
  j["hardware"]["nodes"] = world / 8;
  const Scenario s = parse_scenario(j, dir);
  for (auto _ : state) {
    const sim::SimulationReport r = sim::simulate_scenario(s, {});
    benchmark::DoNotOptimize(r.step_time_s);
  }
  state.counters["ranks"] = world;
}
BENCHMARK(BM_Simulate70BFsdpByClassWorld)
    ->Arg(1024)
    ->Arg(4096)
    ->Arg(16384)
    ->Arg(65536)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

// The event engine alone on the recorded programs of every rank (no recording, no checks).
void engine(benchmark::State& state, const std::string& name, bool all_ranks) {
  const Scenario s = one_step(name);
  std::vector<sim::Program> programs;
  std::vector<sim::GroupInfo> groups;
  sim::SimulateOptions o;
  o.all_ranks = all_ranks;
  o.checks = false;
  o.on_played = [&](const sim::PlayedRun& run) {
    programs = run.programs;
    groups = run.groups;
  };
  sim::simulate_scenario(s, o);
  const sim::HardwareCostModel cost(s.hardware.device,
                                    sim::ClusterLayout{s.hardware.nodes, s.hardware.gpus_per_node});
  sim::EngineOptions eo;
  eo.symmetric = !all_ranks;
  eo.checks = false;
  uint64_t events = 0, instrs = 0;
  for (const auto& p : programs) instrs += p.instrs.size();
  for (auto _ : state) {
    const sim::EngineResult r = sim::simulate(programs, groups, cost, eo);
    events += r.events_processed;
    benchmark::DoNotOptimize(r.makespan_s);
  }
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["instructions"] = static_cast<double>(instrs);
}

void BM_Engine70BFsdp1024ByClass(benchmark::State& state) {
  engine(state, "llama3.1-70b-fsdp1024-h100", false);
}
BENCHMARK(BM_Engine70BFsdp1024ByClass)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(10);

void BM_Engine70BFsdp1024EveryRank(benchmark::State& state) {
  engine(state, "llama3.1-70b-fsdp1024-h100", true);
}
BENCHMARK(BM_Engine70BFsdp1024EveryRank)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
