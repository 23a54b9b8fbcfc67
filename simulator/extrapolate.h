#pragma once
// Steady-state extrapolation: `fullshard simulate` plays a bounded number of training steps and
// extends the whole-run figures to training.steps (NOTE [Steady state] in extrapolate.cc).
// Pure functions over per-step figures, so that the arithmetic is tested on its own.
#include <cstdint>

namespace fullshard::sim {

// The first steps played before the run is checked for a steady state, and the most ever
// played: steps are added (doubling) until the last two agree, up to this cap.
constexpr int kFirstSimulatedSteps = 3;
constexpr int kMaxSimulatedSteps = 12;

// What a rank's memory looks like at a step's end; two consecutive steps that end in the same
// state (and take the same time) make the run periodic from there on.
struct StepEndState {
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t host_bytes = 0;
  uint64_t peak_allocated_bytes = 0;  // peaks so far (the last step must not have raised them)
  uint64_t peak_reserved_bytes = 0;
  uint64_t num_segments = 0;
  bool operator==(const StepEndState&) const = default;
};

// True when the two step durations agree to rounding (times are sums of doubles whose
// magnitude grows with the step index; 1e-9 relative is far below any modelled effect).
bool same_step_time(double a_s, double b_s);

// Two consecutive steps (durations and end states, in order) form a steady state: the later
// ended in the same allocator state as the earlier, did not raise the peaks, and took as long.
bool is_steady(double prev_step_s, const StepEndState& prev, double last_step_s,
               const StepEndState& last);

// How many steps to play next: `played` were played and are not steady; 0 when no more may be
// played (the cap or training.steps reached).
int next_simulated_steps(int played, int steps);

// A whole-run total from the played steps: what they summed to, plus each step not played at
// the last played step's value. simulated_steps <= steps.
double extrapolate_total(double simulated_total, double last_step, int simulated_steps, int steps);

}  // namespace fullshard::sim
