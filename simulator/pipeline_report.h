#pragma once
// The pipeline part of a simulation report (scenarios with a pp dim): the schedule's shape, its
// bubble with equal stage costs (core/pipeline/pipeline_timeline.h), the microbatches each pp
// rank holds at its peak, and the share of the run each pp rank computed no kernel as simulated
// (the bubble, waits for received activations and gradients, and exposed communication).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/report/rank_report.h"
#include "core/scenario/scenario.h"

namespace fullshard::sim {

struct PipelineReport {
  std::string schedule;  // PyTorch's name
  int pp = 1, stages_per_rank = 1, microbatches = 1;
  double schedule_bubble = 0;              // idle share with every action costing the same
  std::vector<int> peak_in_flight;         // per pp rank
  std::vector<double> compute_idle;        // per pp rank (its first rank class), simulated
  std::vector<std::string> stage_modules;  // per stage, as format_stage_split writes them
};

// nullopt without a pp dim. `classes` as simulate_scenario reports them.
std::optional<PipelineReport> pipeline_report(const Scenario& s,
                                              const std::vector<RankReport>& classes);
nlohmann::json pipeline_report_json(const PipelineReport& p);
// Two lines for report_summary.
std::string pipeline_report_text(const PipelineReport& p);

}  // namespace fullshard::sim
