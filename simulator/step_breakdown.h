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

#include "simulator/engine/engine.h"
#include "simulator/engine/program.h"

namespace fullshard::sim {

// Critical-path categories, in report order.
enum class PathKind : uint8_t {
  kCompute,        // device kernels on the compute stream
  kDeviceCopy,     // device kernels on other streams (all-gather copy-in)
  kCommunication,  // collectives
  kHostLink,       // host <-> device copies (CPU offload)
  kCpu,            // CPU work (the offloaded optimizer step)
  kLaunch,         // the device waited for the host to launch work
  kPeerWait,       // a collective waited for other ranks to arrive
};
constexpr int kNumPathKinds = 7;
const char* path_kind_name(PathKind k);  // "compute", "device_copy", ...

struct StepBreakdown {
  double begin_s = 0, end_s = 0;  // the window: host time at the previous and this step end
  std::array<double, kNumStreams> stream_busy_s{};  // busy time inside the window
  double compute_s = 0;        // compute stream busy
  double comm_s = 0;           // union of communication streams' busy time
  double exposed_comm_s = 0;   // communication while the compute stream is idle
  std::array<double, kNumPathKinds> critical_path_s{};  // sums to end_s - begin_s
};

// The window [begin_s, end_s] of the step that ends at the host's marker `end_marker` (an
// instruction index), starting at the previous marker `begin_marker` (or the run's start when
// it is -1). `launch_s` is the cost model's launch overhead.
StepBreakdown step_breakdown(const Program& program, const RankTiming& timing, long begin_marker,
                             long end_marker, double launch_s);

}  // namespace fullshard::sim
