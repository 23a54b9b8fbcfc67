// Simulates a scenario through fullshard's C++ API and prints each rank class's peak allocated
// bytes, one per line, in the order of `fullshard simulate --json`'s rank_classes.
#include <cstdio>
#include <exception>

#include "core/scenario/scenario.h"
#include "simulator/simulate.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: peak_memory SCENARIO.json\n");
    return 2;
  }
  try {
    const fullshard::Scenario s = fullshard::load_scenario_file(argv[1]);
    const fullshard::sim::SimulationReport r = fullshard::sim::simulate_scenario(s);
    for (const auto& c : r.classes)
      std::printf("%llu\n", static_cast<unsigned long long>(c.peak_allocated_bytes));
    return r.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peak_memory: %s\n", e.what());
    return 1;
  }
}
