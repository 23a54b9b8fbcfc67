#pragma once
// The simulator's side of the per-op table (NOTE [Per-op times] in core/report/key_averages.h):
// what the played programs predict each op key costs per training step, from the same cost
// model and the same launches the real run makes.
#include <vector>

#include "core/report/key_averages.h"
#include "simulator/simulate.h"

namespace fullshard::sim {

// NOTE [Predicted per-op times]: for the program of the class that holds `rank`, each kernel's
// played span on its stream (end - start: what the backend's timing of that launch measures) is
// summed under key_id(op_key(name), kind) for its step. A step's kernels are those from its first
// batch load (kLoadBatch) to its "step end" marker: parameter init before step 0 and the
// checkpoint saves after a step are not any step's, as the real run leaves them out. Index k of
// the result is step k of the played steps (the simulator plays the first few and extrapolates
// the rest: predicted_for_step repeats the last played one).
std::vector<PredictedKeyTimes> predicted_key_times(const PlayedRun& run, int rank);
const PredictedKeyTimes* predicted_for_step(const std::vector<PredictedKeyTimes>& steps, int step);

}  // namespace fullshard::sim
