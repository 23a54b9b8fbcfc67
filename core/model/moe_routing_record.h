#pragma once
// Routing as data (docs/moe.md, "Recorded routing"): the router's tokens per expert a real run
// measured, call by call and rank by rank, written to --metrics and replayed by the simulator.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fullshard {

// NOTE [Recorded routing]: the host program is the same on every backend, so the k-th MoE layer
// call of rank r in the training steps (forwards and their recomputes) is the same call in a real
// run and in the simulation of it. A backend with data reads each call's num_tokens_per_expert
// ([E], the reorderer's histc) into the rank's RoutingTape; the runner writes each step's calls
// to --metrics (a validation pass's are dropped: the simulator plays none); training.moe_routing
// {"recorded": M.jsonl} replays them in call order. With ep > 1
// a rank sends by its own histogram and receives by its ep peers' (ep_routing of the group's
// histograms), so the record holds every rank and each rank is simulated on its own. The
// replayed split sizes size "routed" receive buffers exactly as the run allocated them. Each
// line names the order the run called its layers in (moe_call_order), and a scenario that calls
// them in another order refuses the record.
struct RecordedRouting {
  int64_t num_experts = 0;
  std::vector<std::vector<std::vector<int64_t>>> calls;  // [rank][call][expert]
  std::vector<std::vector<size_t>> step_calls;  // [rank][step]: calls per step, where known
  std::string source;                           // where it was read, for messages
  // The order the recorded run called its MoE layers in (moe_call_order of its scenario, each
  // --metrics line's "moe_call_order"); empty for a record written before it was.
  std::string call_order;
};

// One rank's routing while its program runs: records (a real run) or replays (the simulator).
class RoutingTape {
 public:
  RoutingTape() = default;  // records
  RoutingTape(std::shared_ptr<const RecordedRouting> record, int rank);  // replays `rank`'s calls
  bool replaying() const { return record_ != nullptr; }
  // Replay: the next call's histograms of `ranks` (the ep group in group order, or this rank).
  // Throws InputError naming training.moe_routing when the record holds no further call.
  std::vector<std::vector<int64_t>> next(const std::vector<int>& ranks);
  // Record: one call's histogram.
  void record(std::vector<int64_t> tokens_per_expert);
  // The calls recorded since the last take, in call order.
  std::vector<std::vector<int64_t>> take();

 private:
  std::shared_ptr<const RecordedRouting> record_;
  int rank_ = 0;
  size_t next_ = 0;
  std::vector<std::vector<int64_t>> recorded_;
};

}  // namespace fullshard
