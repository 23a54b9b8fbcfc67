#pragma once
// Runs one rank of a scenario for real on the CPU backend: the same TrainingProgram the
// simulator plays, against CpuBackend. Used by the worker processes of `fullshard train` and
// by tests that run ranks as threads over an in-process store.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/data.h"
#include "backends/gloo/process_group.h"
#include "core/memory/memory_tracker.h"
#include "core/runtime/stream.h"
#include "core/scenario/scenario.h"

namespace gloo::rendezvous {
class Store;
}

namespace fullshard::cpu {

struct RankOptions {
  int rank = 0;
  std::shared_ptr<::gloo::rendezvous::Store> store;  // shared by all ranks (unused for 1 rank)
  std::string hostname = "127.0.0.1";                 // this rank's address for Gloo's TCP device
  gloo_backend::ProcessGroupOptions collectives;
  std::shared_ptr<const TextCorpus> corpus;  // default: TextCorpus::generated(seed)
  int steps = -1;                            // -1: the scenario's training.steps
  // Fault injection for tests of failure handling: at the start of step `fault_step` this
  // rank dies (kill: SIGKILL to itself) or stalls forever (stall).
  enum class Fault { kNone, kKill, kStall } fault = Fault::kNone;
  int fault_step = 0;
  // Keep the measured memory timeline (downsampled to at most this many points; 0: none).
  size_t timeline_points = 0;
};

// One point of the measured memory timeline: the state right after an allocation or free,
// at the host time it happened (seconds since the rank's backend was created).
struct MeasuredPoint {
  double time_s = 0;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t host_bytes = 0;
  CategoryBytes by_category{};
  int32_t what = -1;  // index into RankResult::timeline_names
  bool is_alloc = true;
};

struct StepMetrics {
  int step = 0;
  double loss = 0;           // this rank's loss, mean over its micro-batches
  double seconds = 0;        // wall time of the step on this rank
  int64_t tokens = 0;        // tokens this rank trained on in the step
  uint64_t peak_allocated_bytes = 0;  // since the start of the run
  uint64_t peak_reserved_bytes = 0;
  double compute_s = 0;       // compute stream busy
  double comm_s = 0;          // union of the communication streams' busy time
  double exposed_comm_s = 0;  // communication no computation overlapped
  double flops = 0;           // FLOPs of the kernels this rank ran in the step (as ops declare them)
};

struct RankResult {
  int rank = 0;
  std::vector<StepMetrics> steps;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_host_bytes = 0;
  MemorySnapshot at_peak_allocated;
  std::vector<MeasuredPoint> timeline;  // with RankOptions::timeline_points
  std::vector<std::string> timeline_names;
  // The final parameters, unsharded view of this rank's shards: fqn -> fp32 values of the
  // rows this rank owns (filled when `collect_params` is set).
  std::vector<std::pair<std::string, std::vector<float>>> local_params;
};

// Runs `steps` training steps of `s` as `o.rank`. Throws InputError for a scenario the CPU
// backend cannot run, gloo_backend::CollectiveError when a peer fails.
RankResult run_rank(const Scenario& s, const RankOptions& o,
                    const std::function<void(const StepMetrics&)>& on_step = {}, bool collect_params = false);

}  // namespace fullshard::cpu
