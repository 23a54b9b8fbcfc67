#pragma once
// The report of one rank (class) that predicted and measured runs share: peaks, breakdown at
// the peak, the memory timeline, busy times (docs/report-format.md). The simulator's
// SimulationReport holds one per rank class; a real run's measured report one per rank.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory/caching_allocator.h"
#include "core/memory/category.h"
#include "core/memory/memory_tracker.h"
#include "core/memory/moe_memory.h"
#include "core/runtime/op.h"
#include "core/runtime/stream.h"

namespace fullshard {

struct TimelinePoint {
  double time_s = 0;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t host_bytes = 0;
  CategoryBytes by_category{};
  // NOTE [Timeline labels]: indices into RankClassReport::timeline_names (-1: none), so the
  // plots can say what each point is: the buffer allocated or freed here, and the kernel or
  // collective the host issued next (the work the allocation serves; its start is time_s).
  int32_t what = -1;
  int32_t op = -1;
  bool is_alloc = true;
  // NOTE [Routed tokens in the timeline]: the bytes allocated for routed tokens after this
  // point (moe_part's kRoutedTokens, core/memory/moe_memory.h): a running sum over every
  // allocation and free of the run, each classified by its category and buffer name, taken
  // before the timeline is downsampled. Its value at the peak is moe_at_peak's routed_tokens.
  // 0 throughout for a dense model (the report then omits the column).
  uint64_t routed_bytes = 0;
};

// The running routed-tokens bytes over a run's memory events, in order (NOTE [Routed tokens in
// the timeline]). An allocation is classified by its category and name (`what`) and its size
// is its category's change from `before` (the event before's by_category); a free gives back
// what its buffer's allocation took, whatever the free is labelled.
class RoutedTokenBytes {
 public:
  uint64_t after(const MemoryEvent& e, const CategoryBytes& before, std::string_view what);

 private:
  std::unordered_map<uint64_t, uint64_t> live_;  // buffer id -> bytes
  uint64_t bytes_ = 0;
};

// A kernel or collective running on some stream at a moment (the peak).
struct InFlightOp {
  std::string stream;
  std::string name;
  double start_s = 0, end_s = 0;
};

struct OutOfMemoryInfo {
  uint64_t requested_bytes = 0;
  std::string what;  // what was being allocated
  std::string category;
  uint64_t capacity_bytes = 0;
  MemorySnapshot at_failure;
  int step = 0;  // -1: before the first step (the model's initialisation)
};

// One rank, or one class of ranks whose programs are identical (the simulator played one
// representative), as the simulator predicts it or a real backend measured it
// (NOTE [Measured report] in tools/fullshard/train_commands.cc). Times are seconds: simulated
// time, or the measuring backend's clock.
struct RankReport {
  std::vector<int> ranks;
  int representative = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_host_bytes = 0;
  // The peaks before the first step (the model's initialisation, training.init: NOTE
  // [Initialisation modes] in core/train/model_init.cc); the peaks above include them.
  uint64_t init_peak_allocated_bytes = 0;
  uint64_t init_peak_reserved_bytes = 0;
  CategoryBytes breakdown_at_peak{};  // device allocated bytes by category at the peak
  // A mixture-of-experts model's experts and routed tokens among them (NOTE [MoE memory at the
  // peak] in core/memory/moe_memory.h); nullopt for a dense model.
  std::optional<MoeBytes> moe_at_peak;
  double peak_time_s = 0;
  uint64_t end_allocated_bytes = 0;            // after the last step
  std::vector<uint64_t> allocated_after_step;  // allocated bytes after each step's end
  AllocatorStats allocator;
  std::vector<TimelinePoint> timeline;
  std::vector<std::string> timeline_names;    // TimelinePoint::what / op index this
  std::vector<InFlightOp> in_flight_at_peak;  // on every stream at peak_time_s
  // Expert parallelism's all-to-alls (dispatch, combine, their split-size exchange and
  // backwards) over the whole run, in start order: the simulator's (a measured report has none).
  std::vector<InFlightOp> all_to_all_spans;
  std::optional<OutOfMemoryInfo> oom;
  double busy_s[kNumStreams] = {};
  double compute_s = 0, exposed_comm_s = 0, comm_s = 0;  // whole run
  double end_time_s = 0;                                 // when the rank's last work finished
  double last_step_s = 0;     // duration of its last step (0 when it did not finish)
  uint64_t instructions = 0;  // recorded host-program instructions
  int collectives_per_step[kCollectiveKindCount] = {};  // by CollectiveKind, in the last step
};

// The report format's objects for one rank (class): its entry of "rank_classes", and its
// entry of "memory_timeline" (columns; null when it has no timeline). `class_index` is its
// position in the report.
nlohmann::json rank_class_json(const RankReport& r);
nlohmann::json rank_timeline_json(const RankReport& r, size_t class_index);
// The inverse of both (a measured rank report travels from the worker to the launcher in
// this form). Throws InputError naming the field when `cls` is not such an object.
RankReport rank_report_from_json(const nlohmann::json& cls, const nlohmann::json& timeline);

}  // namespace fullshard
