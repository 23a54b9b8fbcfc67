#pragma once
// The last of simulate_scenario's three parts (record, play, assemble; simulate.cc): turn what
// was recorded (play_record.h) and what the engine played into the report's rank classes.
#include <optional>
#include <vector>

#include "simulator/engine/cost_model.h"
#include "simulator/engine/engine.h"
#include "simulator/play_record.h"
#include "simulator/simulate.h"

namespace fullshard::sim {

struct AssembleOptions {
  int steps = 0;                   // of the whole run (the scenario's training.steps are played)
  size_t max_timeline_points = 0;  // SimulateOptions::max_timeline_points
  bool may_play_more = false;      // nullopt when the last two played steps are not steady
  bool play_checkpoint = true;     // the unplayed saves add the closed form's exposed time
};

// Fills `rep` (whose header play_steps set) from the recordings and the engine's result; with
// may_play_more, nullopt when more steps should be played (NOTE [Steady state]).
std::optional<SimulationReport> assemble_report(SimulationReport rep, const Scenario& s,
                                                const RecordedPrograms& rec, const EngineResult& er,
                                                const CostModel& cost,
                                                const std::vector<GroupInfo>& groups,
                                                const AssembleOptions& opt);

}  // namespace fullshard::sim
