#pragma once
// What a real backend measures (core/runtime/backend.h's optional measurement hooks): per-stream
// busy intervals, the collectives' intervals, work starts and kernel times, all on one clock
// (seconds since the backend was created, host steady clock).
//
// NOTE [One record per timed work]: every kernel or collective a stream ran becomes one busy
// interval of its stream; a collective (a group) is also a CollectiveInterval with the
// very same numbers (what measured_step_breakdown matches compute-stream collectives by), a
// kernel also a KernelTime with its launch's host_seq (per-op times); and, when the memory
// timeline was being recorded as the host issued it, a work start {host_seq, begin}. The CPU
// backend records with its host clock around each task; the CUDA backend reads timing events
// back (backends/cuda/stream_times.h) and records the same way.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/backend.h"

namespace fullshard::backends {

struct Measurements {
  StreamIntervals busy;                             // per stream, in issue order
  std::vector<CollectiveInterval> collectives;      // also in their stream's busy list
  std::vector<std::pair<uint64_t, double>> starts;  // {seq, begin}: only when asked for
  std::vector<KernelTime> kernels;                  // every kernel (no group): per-op times

  // One kernel (`group` null) or collective (`group`: its process group's name) that ran on
  // `stream` over [begin_s, end_s), issued at host_seq `seq` (NOTE above).
  void add(StreamRole stream, uint64_t seq, const std::string* group, double begin_s, double end_s,
           bool with_start);
  // Appends everything of `more`, in order.
  void append(Measurements&& more);
};

// Measurements behind a mutex (streams record from their own threads), with the clock.
class MeasurementStore {
 public:
  using Clock = std::chrono::steady_clock;

  // Seconds since construction: the clock of every interval.
  double clock_s() const { return seconds_at(Clock::now()); }
  double seconds_at(Clock::time_point t) const {
    return std::chrono::duration<double>(t - created_).count();
  }

  void add(StreamRole stream, uint64_t seq, const std::string* group, double begin_s, double end_s,
           bool with_start);
  void append(Measurements&& more);

  // Each returns what was recorded since its last call and clears it.
  StreamIntervals take_busy();
  std::vector<CollectiveInterval> take_collectives();
  std::vector<std::pair<uint64_t, double>> take_starts();
  std::vector<KernelTime> take_kernels();

 private:
  Clock::time_point created_ = Clock::now();
  std::mutex mu_;
  Measurements m_;
};

}  // namespace fullshard::backends
