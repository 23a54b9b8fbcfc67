#pragma once
// NOTE [Per-op times]: the per-op table of a step, as PyTorch's profiler groups its events with
// prof.key_averages(): every op the host launched is counted under its key (op_key: its name
// with the layer index folded out, and its kind), with the number of calls, the time its
// kernels ran on their stream (measured: the backend's KernelTime of the launch, joined by
// host_seq; no per-op synchronisation), and the FLOPs and bytes the op declares for the cost
// model (docs/ops.md), so achieved FLOP/s and bytes/s follow. The simulator prices the same
// launches (simulator/op_prediction.h), so predicted_s sits beside measured_s per key: the
// keys where they differ most are where the time model is wrong on this machine
// (docs/cost-model.md). An op whose kernel was not timed (timing off) counts its call with 0 s.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/runtime/backend.h"

namespace fullshard {

// The op's name with every layer index folded out: a dotted path component made of digits
// ("layers.3.attention.wq backward_weight" -> "layers.attention.wq backward_weight", GPT-2's
// "h.11.mlp.c_fc" -> "h.mlp.c_fc") and a bracketed index ("post_forward[2]" -> "post_forward").
// Everything else stays, so two different modules never share a key.
std::string op_key(std::string_view name);

struct KeyAverage {
  std::string key;   // op_key of the name
  std::string kind;  // op_kind_name
  int64_t calls = 0;
  double measured_s = 0;    // sum of its kernels' measured times
  double flops = 0;         // declared (OpCall::flops), summed over calls
  double bytes = 0;         // declared (OpCall::bytes), summed over calls
  double predicted_s = -1;  // the simulator's seconds for the same key and step; < 0: none
  double flops_per_s() const { return measured_s > 0 ? flops / measured_s : 0; }
  double bytes_per_s() const { return measured_s > 0 ? bytes / measured_s : 0; }
};

// key + '\t' + kind: what a table is looked up by (two kinds under one name stay apart).
std::string key_id(const std::string& key, const std::string& kind);

// The table of one step: `ops` launched and `times` measured (joined by seq; a time whose seq
// is no launched op is ignored), most measured time first (then by key).
std::vector<KeyAverage> key_averages(const std::vector<LaunchedOp>& ops,
                                     const std::vector<KernelTime>& times);

// Predicted seconds per key_id for one step (the simulator's; simulator/op_prediction.h).
using PredictedKeyTimes = std::map<std::string, double>;
// Sets predicted_s of every row from `predicted` (0 for a key the simulator did not launch); a
// predicted key the table lacks is added with 0 calls, so both sums cover the same keys.
void attach_predictions(std::vector<KeyAverage>& table, const PredictedKeyTimes& predicted);

// The `n` rows with both times where |measured - predicted| is largest, largest first.
std::vector<KeyAverage> differ_most(const std::vector<KeyAverage>& table, size_t n);

// The report's "ops" array (docs/report-format.md) and its inverse (InputError naming the field).
nlohmann::json key_averages_json(const std::vector<KeyAverage>& table);
std::vector<KeyAverage> key_averages_from_json(const nlohmann::json& j);

}  // namespace fullshard
