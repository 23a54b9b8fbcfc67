#pragma once
// What one rank measured in one training step (run_rank's on_step), and its JSON: the record a
// worker sends the launcher on its report pipe (NOTE [Worker messages] in runner/worker.cc).
#include <cstdint>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/key_averages.h"

namespace fullshard::runner {

struct StepMetrics {
  int step = 0;
  double loss = 0;  // this rank's loss, mean over its micro-batches
  double eval_loss =
      std::numeric_limits<double>::quiet_NaN();  // validation loss after the step (NaN: none)
  double seconds = 0;                            // wall time of the step on this rank
  int64_t tokens = 0;                            // tokens this rank trained on in the step
  uint64_t peak_allocated_bytes = 0;             // since the start of the run
  uint64_t peak_reserved_bytes = 0;
  // From the backend's optional stream measurement (Backend::take_busy_intervals); 0 when
  // it measures none.
  double compute_s = 0;       // compute stream busy
  double comm_s = 0;          // union of the communication streams' busy time
  double exposed_comm_s = 0;  // communication no computation overlapped
  double flops = 0;  // FLOPs of the kernels this rank ran in the step (as ops declare them)
  // With RankOptions::op_table: the step's ops by key, measured where the backend times kernels
  // (predicted_s unset: the launcher adds the simulator's).
  std::vector<KeyAverage> ops;
  // A mixture-of-experts model's router histograms of the step's MoE layer calls, in call order
  // ([calls][experts]; NOTE [Recorded routing] in core/model/moe_routing_record.h).
  std::vector<std::vector<int64_t>> tokens_per_expert;
};

// NOTE [Non-finite loss]: JSON has no NaN or infinity (nlohmann writes them as null), so a
// loss travels as a number when finite and as the string "nan", "inf" or "-inf" otherwise;
// the reader takes both forms (a missing loss reads 0, null or another string NaN). The
// eval_loss of a step without validation (NaN) is null. Metrics lines (the launcher's
// --metrics file) carry null for a non-finite loss, with "nonfinite": true.
nlohmann::json loss_json(double v);
double loss_from_json(const nlohmann::json& j, const char* key);

// The record's fields: step, loss, eval_loss, seconds, tokens, peak_allocated_bytes,
// peak_reserved_bytes, compute_s, comm_s, exposed_comm_s, flops, ops (key_averages_json),
// tokens_per_expert (only when there are MoE calls).
// `with_ops` false writes "ops": null (ranks other than 0 send no per-op table).
nlohmann::json step_metrics_json(const StepMetrics& m, bool with_ops = true);
// Its inverse; a missing field keeps its default, "ops" null or missing reads empty. Throws
// InputError for a malformed per-op table (key_averages_from_json).
StepMetrics step_metrics_from_json(const nlohmann::json& j);

}  // namespace fullshard::runner
