#pragma once
// `fullshard simulate --trace TRACE.json`: the played programs as a Chrome Trace Event file
// (the JSON object format) that Perfetto (ui.perfetto.dev, "Open trace file") and
// chrome://tracing load. docs/plots.md describes what is in it:
//   - one process per rank class (or rank with --ranks all), named "ranks 0-7", pid 1 + its
//     (representative) rank;
//   - one thread per stream ("compute", "all_gather", ...) plus "host", and "checkpoint" when
//     checkpoint saves are played (their writes; "checkpoint save" spans on "host");
//   - complete ("X") events: kernels (cat "compute" or "copy"), collectives (cat
//     "collective", args: collective, bytes, dtype, reduce_op, group, group_size, and
//     algorithm / protocol when the cost model names them), event waits that stall a stream
//     (cat "sync"), host synchronizes and steps (on "host");
//   - flow events ("s" -> "f") from the op before each event record to the first op after the
//     matching wait on the other stream; instant ("i") events for the host's phase markers;
//   - counters ("C"): "memory" {allocated_bytes, reserved_bytes[, host_bytes]} and
//     "memory by category" {category: bytes}, from the report's timeline.
// Timestamps are microseconds of simulated device time; per thread they never decrease.
#include <ostream>

#include "simulator/simulate.h"

namespace fullshard::sim {

void write_chrome_trace(const PlayedRun& run, std::ostream& out);

}  // namespace fullshard::sim
