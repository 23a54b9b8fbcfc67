#pragma once
// The event engine: plays every rank's program together and times it, like CUDA would run it.
// See NOTE [Timing semantics] in engine.cc.
#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/common/intervals.h"
#include "simulator/engine/checks.h"
#include "simulator/engine/cost_model.h"
#include "simulator/engine/diagnostics.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

struct EngineOptions {
  // `programs` may hold a subset of the ranks (typically one representative whose program is
  // identical to all others'); a collective starts when its present members arrive, and the
  // cost model still sees the full group. Otherwise every member of every used group must
  // have a program.
  bool symmetric = false;
  // Also run the structural checks (check_programs) and put their problems first. The
  // checks never depend on timing; call check_programs() alone to check without timing.
  bool checks = true;
  CheckOptions check;  // its `symmetric` is overridden by the field above
  // Per program (parallel to `programs`): throughput factor of its device kernels (a straggler
  // at 0.8 runs them 1.25x longer). Empty: every rank at 1.
  std::vector<double> speed;
};

constexpr double kNotRun = -1.0;  // an instruction that never ran (the programs hang)

struct InstrTime {
  // Stream instructions: when the host put it on the stream (after its launch overhead), when
  // the stream started it and finished it. Host instructions: when the host reached it, and
  // when it went on (later than start only for a blocking kSynchronize).
  double issue = kNotRun;
  double start = kNotRun;
  double end = kNotRun;
  bool operator==(const InstrTime&) const = default;
};

struct RankTiming {
  int rank = 0;
  std::vector<InstrTime> times;              // parallel to Program::instrs
  double end_s = 0;                          // last stream or host activity
  std::array<double, kNumStreams> busy_s{};  // sum of kernel / collective durations per stream
  double compute_s = 0;                      // compute kernels (NOTE [Compute or communication])
  double comm_s = 0;                         // time some communication stream is busy (union)
  // Time some communication stream (all_gather, reduce_scatter, all_reduce, host_to_device,
  // device_to_host) is busy while the compute stream is idle. all_gather_copy_in is a copy
  // on the device, not communication.
  double exposed_comm_s = 0;
  bool completed = true;  // false when the rank hung
};

struct EngineResult {
  std::vector<RankTiming> ranks;  // parallel to programs
  double makespan_s = 0;
  uint64_t events_processed = 0;
  bool completed = true;          // false when some rank hung (see problems)
  std::vector<Problem> problems;  // structural checks first, then hangs
  bool ok() const { return completed && problems.empty(); }
};

// Deterministic: identical input gives a bit-identical result. Never hangs: programs that
// deadlock (a member missing from a collective, cross-group waits) end with
// completed = false and a kCollectiveHang problem naming who waits where and why.
EngineResult simulate(const std::vector<Program>& programs, const std::vector<GroupInfo>& groups,
                      const CostModel& cost, const EngineOptions& options = {});

// NOTE [Communication inside a kernel] (cost_model.h) on a played op: its span [start, end]
// is compute until `compute_end` and communication from `comm_begin` (both inside the span:
// the exposed part is [compute_end, end]); nullopt for an op without inner communication.
struct InnerCommSpan {
  double compute_end = 0;
  double comm_begin = 0;
};
std::optional<InnerCommSpan> inner_comm_span(const Instr& op, const InstrTime& t,
                                             const CostModel& cost);

// uncovered_seconds (exposed communication) is core/common/intervals.h.
using fullshard::uncovered_seconds;

}  // namespace fullshard::sim
