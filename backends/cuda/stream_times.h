#pragma once
// NOTE [Measured stream times on the GPU]: the CUDA backend measures what the CPU backend
// measures with its host clock (per-stream busy intervals, collective intervals, work starts;
// core/runtime/backend.h) with timing events: StreamTimer (stream_timer.h) records an event
// before and after each kernel or collective on its stream, and reads them back where every
// stream has finished (after the step's host synchronize) as milliseconds since an anchor event.
// The anchor is recorded on an idle stream and waited for, so its GPU time is the host clock's
// anchor_s (to the few microseconds a synchronize takes); every take re-anchors, so the float
// milliseconds of cudaEventElapsedTime never grow past one step. This file turns those readings
// into the backend's measurements (backends/common/measurements.h): pure host code, unit-tested
// without a GPU (gpu.runtime_host).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/measurements.h"
#include "core/runtime/backend.h"

namespace fullshard::cuda {

// One kernel or collective as its events read back: milliseconds after the anchor event.
struct TimedWork {
  StreamRole stream = StreamRole::kDefault;
  uint64_t seq = 0;   // Backend::host_seq() when the host issued it
  std::string group;  // the process group's name for a collective; empty for a kernel
  float begin_ms = 0, end_ms = 0;
};

// What the backend adds to its MeasurementStore (NOTE [One record per timed work]).
using StreamTimes = backends::Measurements;

// Seconds on the host clock: anchor_s + ms / 1000. An end read before its begin (the two
// events' timestamps have ~0.5 us resolution) is taken as the begin.
StreamTimes assemble_stream_times(const std::vector<TimedWork>& work, double anchor_s,
                                  bool with_starts);

// FULLSHARD_CUDA_STREAM_TIMES: unset, "", "1" or "on" measure (the default); "0" or "off" turn
// the timing events off (the runner then reports no compute / communication split). Anything
// else: InputError naming the variable. nullptr = unset.
bool parse_stream_times(const char* value);

}  // namespace fullshard::cuda
