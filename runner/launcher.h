#pragma once
// `fullshard train`: the local launcher. It starts N worker processes (runner/worker.h; their
// supervision: runner/worker_processes.h) with a rendezvous FileStore in a temporary directory,
// hands them the run's options (NOTE [Worker options]), combines their steps
// (runner/step_aggregation.h), shows progress and writes the metrics (runner/metrics_file.h).
// Backend-neutral: the worker builds its Backend from the registry (runner/backend_factory.h).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario/scenario.h"
#include "runner/backend_factory.h"
#include "runner/launch_options.h"
#include "runner/measured_rank.h"
#include "runner/step_aggregation.h"
#include "runner/worker.h"

namespace fullshard::runner {

// Checks the options a user typed (steps, nproc, timeout) and, for `kind`, that this machine
// can run `s` (GPUs present for a device backend; host memory for CPU workers of a GPU
// scenario). Throws InputError naming the flag or field with the fix.
void validate_launch(const LaunchOptions& o, const Scenario& s, const BackendKind& kind);
// Host memory the kernel says is available (/proc/meminfo MemAvailable), 0 when unknown.
uint64_t host_memory_available_bytes();

struct LaunchResult {
  int exit_code = 0;  // 0 ok; 1 a rank failed or the loss became non-finite; 2 bad input
  std::vector<std::string> errors;  // one line per failed rank
  std::vector<MeasuredRank> ranks;  // by rank (complete only when exit_code == 0)
  std::vector<StepSummary> steps;
  double wall_s = 0;
  // With collect_reports: per rank, its report as the worker measured it, in the report
  // format's objects: {"class": rank_class_json, "timeline": rank_timeline_json}.
  std::vector<nlohmann::json> rank_reports;
  std::string backend;      // the backend the workers ran
  int nonfinite_step = -1;  // the first step whose loss was non-finite on some rank (-1: none)
  // A mixture-of-experts run's router histograms, every rank's calls over the steps (NOTE
  // [Recorded routing] in core/model/moe_routing_record.h); empty calls for a dense model.
  RecordedRouting routing;
};

// Validates the scenario, starts the workers, waits for them, kills the rest when one fails
// (after the collective timeout), and removes the rendezvous directory.
LaunchResult launch_local(const LaunchOptions& o, const BackendRegistry& backends);

}  // namespace fullshard::runner
