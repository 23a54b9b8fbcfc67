#pragma once
// The optional measurement part of a Backend (NOTE [Backend parts] in core/runtime/backend.h):
// what a real backend measured of its streams, on its clock. The simulator has none; the real
// backends share one implementation (backends/common/measurements.h, NOTE [One record per timed
// work]).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/stream.h"

namespace fullshard {

// Per-stream busy intervals [begin, end) in seconds on the backend's clock (time since it was
// created), by StreamRole: what a real backend measured since the last take.
using StreamIntervals = std::array<std::vector<std::pair<double, double>>, kNumStreams>;

// One collective a real backend ran: its process group's name ("tp", "shard", "replicate",
// "shard+tp", ...), the stream it ran on, and when ([begin, end) on the StreamIntervals clock;
// the same interval is also in that stream's busy intervals).
struct CollectiveInterval {
  std::string group;
  StreamRole stream = StreamRole::kDefault;
  double begin_s = 0, end_s = 0;
};

// One kernel a real backend timed (NOTE [Per-op times] in core/report/key_averages.h): the
// host_seq() at which the host launched it and when its stream ran it, on clock_s().
struct KernelTime {
  uint64_t seq = 0;
  double begin_s = 0, end_s = 0;
};

// Each take returns what was measured since its last call and clears it (Backend's take_*
// entry points document them).
class MeasurementProbe {
 public:
  virtual ~MeasurementProbe() = default;
  // Seconds since the backend was created: the clock of every interval.
  virtual double clock_s() const = 0;
  // nullopt when the backend measures nothing (e.g. CUDA without timing events).
  virtual std::optional<StreamIntervals> take_busy_intervals() = 0;
  virtual std::vector<CollectiveInterval> take_collective_intervals() = 0;
  virtual std::vector<std::pair<uint64_t, double>> take_work_starts() = 0;
  virtual std::vector<KernelTime> take_kernel_times() = 0;
};

}  // namespace fullshard
