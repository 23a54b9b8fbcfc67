#pragma once
// The per-op table in `fullshard train` and `fullshard compare` (NOTE [Per-op times] in
// core/report/key_averages.h): the simulator's prediction for the run, and its printing.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/key_averages.h"
#include "core/scenario/scenario.h"
#include "runner/launcher.h"
#include "simulator/simulate.h"

namespace fullshard::cli {

// SimulateOptions::on_played that keeps rank 0's predicted seconds per op key and step
// (simulator/op_prediction.h) in *out.
std::function<void(const sim::PlayedRun&)> keep_predicted_ops(std::vector<PredictedKeyTimes>* out);

// Simulates `s` (its steps as the run will run them) for the per-op prediction alone; on a
// simulation that cannot complete, returns nothing and says why on stderr (the run goes on
// with measured times only).
std::vector<PredictedKeyTimes> predict_ops(Scenario s, int steps);

// The lines `compare` prints: the sums of rank 0's last step and the `n` keys where measured
// and predicted differ most. Empty when the run has no table.
std::string differ_most_text(const std::vector<KeyAverage>& ops, size_t n);

// The measured report's "ops_per_step" (docs/report-format.md): [{step, rank, ops}].
nlohmann::json ops_per_step_json(const std::vector<runner::StepSummary>& steps);

}  // namespace fullshard::cli
