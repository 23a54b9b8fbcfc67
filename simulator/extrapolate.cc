#include "simulator/extrapolate.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"

namespace fullshard::sim {

// NOTE [Steady state]: a training step's host program is the same instruction sequence from
// the second step on: the optimizer state exists after the first, and the host's control
// flow depends on neither timing nor values (docs/architecture.md). The caching allocator is
// a deterministic function of its state and the requests it sees, so if step k ends in the
// same allocator state as step k-1, step k+1 sees the same state and the same requests as
// step k and repeats it byte for byte: same allocations, same peaks, same end state, and by
// induction every later step too. The state is compared through a proxy (StepEndState:
// allocated, reserved, host and per-peak bytes and the segment count); the peaks in it make
// sure the last played step did not raise the peak, so the peak over the played steps is the
// peak of the whole run. Timing: each step ends with the host reading the loss back
// (a synchronize), so the next step's launches start from the same host/device lag; equal
// durations of the last two played steps are required as well. Whole-run figures are then
// the played steps' sum plus the last played step's value for each step not played.
// tests/unit/sim_extrapolate_test.cc checks this against playing every step.

bool same_step_time(double a_s, double b_s) {
  return std::fabs(a_s - b_s) <= 1e-9 * std::max(std::fabs(a_s), std::fabs(b_s)) + 1e-15;
}

bool is_steady(double prev_step_s, const StepEndState& prev, double last_step_s,
               const StepEndState& last) {
  return prev == last && same_step_time(prev_step_s, last_step_s);
}

int next_simulated_steps(int played, int steps) {
  FULLSHARD_CHECK(played >= 1 && played <= steps, "played steps out of range");
  if (played >= steps || played >= kMaxSimulatedSteps) return 0;
  return std::min({2 * played, steps, kMaxSimulatedSteps});
}

double extrapolate_total(double simulated_total, double last_step, int simulated_steps, int steps) {
  FULLSHARD_CHECK(simulated_steps >= 1 && simulated_steps <= steps, "simulated steps out of range");
  return simulated_total + static_cast<double>(steps - simulated_steps) * last_step;
}

}  // namespace fullshard::sim
