#pragma once
// One step of one rank, as the engine played it: per-stream busy time, compute, communication
// and exposed communication inside the step's window, and the critical path: walking back from
// the step's end through whatever each moment waited for (the previous op on a stream, an
// event, the host's launches or synchronisations, a collective's late peers), the step's time
// split by what the path runs through. docs/report-format.md ("last_step").
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/report/step_breakdown.h"
#include "simulator/engine/cost_model.h"
#include "simulator/engine/engine.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// The report model (PathKind, StepBreakdown) is shared with measured runs.
using fullshard::kNumPathKinds;
using fullshard::path_kind_name;
using fullshard::PathKind;
using fullshard::StepBreakdown;

// The window [begin_s, end_s] of the step that ends at the host's marker `end_marker` (an
// instruction index), starting at the previous marker `begin_marker` (or the run's start when
// it is -1). `launch_s` is the cost model's launch overhead. With `cost`, a kernel that carries
// communication inside it (NOTE [Communication inside a kernel]: async TP) counts its copies as
// tp communication at the end of its span, and its exposed part as communication, not compute.
StepBreakdown step_breakdown(const Program& program, const RankTiming& timing, long begin_marker,
                             long end_marker, double launch_s,
                             const std::vector<GroupInfo>* groups = nullptr,
                             const CostModel* cost = nullptr);

}  // namespace fullshard::sim
