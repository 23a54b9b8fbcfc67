#pragma once
// What a real backend measures: its MeasurementProbe (core/runtime/measurement_probe.h, the
// Backend's optional measurement part): per-stream busy intervals, the collectives' intervals,
// work starts and kernel times, all on one clock (seconds since the backend was created, host
// steady clock).
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
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/measurement_probe.h"

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

// Measurements behind a mutex (streams record from their own threads), with the clock: the
// probe both real backends hand to their Backend. The CPU backend adds each task's interval as
// its stream worker runs it; the CUDA backend sets a collector that reads its timing events
// back before each take.
class MeasurementStore : public MeasurementProbe {
 public:
  using Clock = std::chrono::steady_clock;

  // Seconds since construction: the clock of every interval.
  double clock_s() const override { return seconds_at(Clock::now()); }
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

  // How the store is filled before each take_* of the probe (the host thread calls it, outside
  // the lock): it may add() or append() and returns false when nothing is measured (the takes
  // then return nullopt / nothing). Unset: the store is filled as the work runs.
  void set_collector(std::function<bool()> collect) { collect_ = std::move(collect); }

  // The MeasurementProbe: collect, then take.
  std::optional<StreamIntervals> take_busy_intervals() override;
  std::vector<CollectiveInterval> take_collective_intervals() override;
  std::vector<std::pair<uint64_t, double>> take_work_starts() override;
  std::vector<KernelTime> take_kernel_times() override;

 private:
  Clock::time_point created_ = Clock::now();
  std::function<bool()> collect_;
  std::mutex mu_;
  Measurements m_;
};

}  // namespace fullshard::backends
