#pragma once
// The simulation report as JSON (docs/report-format.md) and as the CLI's text summary.
#include <string>

#include <nlohmann/json.hpp>

#include "simulator/simulate.h"

namespace fullshard::sim {

nlohmann::json report_json(const SimulationReport& r);
std::string report_summary(const SimulationReport& r);
std::string format_bytes(uint64_t bytes);  // "12.34 GiB", "512.0 MiB", "640 B"

}  // namespace fullshard::sim
