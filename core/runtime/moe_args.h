#pragma once
// Argument structs of the mixture-of-experts kinds (op_kinds.def, docs/moe.md): the router's
// [N, E] score ops, token reordering over rows, torchtitan's padded permutation and the grouped
// GEMM. encode / decode as every *_args.h (core/runtime/op_args.h).
#include <cstdint>
#include <vector>

#include "core/runtime/op.h"

namespace fullshard {

// kSoftmax, kSigmoid (+Backward), kTopK (+Backward), kRouteNorm (+Backward), kHistogram,
// kWeightedSum (+Backward), kGatherScores: N tokens, E experts, top-k K (0 where the kind has none).
// iargs {tokens, experts, top_k}
struct RouterArgs {
  int64_t tokens = 0, experts = 0, top_k = 0;

  void encode(OpCall& op) const { op.iargs = {tokens, experts, top_k}; }
  static RouterArgs decode(const OpCall& op);
};

// kExpertCapacity: (scores [N, K] fp32, expert indices [N, K] int64) -> the indices with each
// expert's slots past `capacity` set to E (NOTE [Capacity factor] in core/model/moe_routing.h):
// policy 0 keeps the highest scores (ties to the lower token), 1 the first tokens.
// iargs {tokens, experts, top_k, capacity, policy}
struct CapacityArgs {
  int64_t tokens = 0, experts = 0, top_k = 0, capacity = 0, policy = 0;

  void encode(OpCall& op) const { op.iargs = {tokens, experts, top_k, capacity, policy}; }
  static CapacityArgs decode(const OpCall& op);
};

// kRouterChoice (NOTE [Expert bias] in core/model/expert_bias.h): N tokens' scores over E
// experts, plus the expert bias when there is a second input; with `groups` > 1 the experts in
// E / groups consecutive groups, a group scored by the sum of its two highest, and each token's
// experts outside its `limited` best groups set to -inf (ties to the lower group).
// iargs {tokens, experts, groups, limited}
struct RouterChoiceArgs {
  int64_t tokens = 0, experts = 0, groups = 1, limited = 1;

  void encode(OpCall& op) const { op.iargs = {tokens, experts, groups, limited}; }
  static RouterChoiceArgs decode(const OpCall& op);
};

// kExpertLoadStack, kExpertBiasUpdate: `layers` MoE layers of E experts; divisors[l] (the
// stack's floor division of layer l); coeff the bias update rate (load_balance_coeff).
// iargs {layers, experts, divisors...}, fargs {coeff}
struct ExpertLoadArgs {
  int64_t layers = 0, experts = 0;
  std::vector<int64_t> divisors;
  double coeff = 0;

  void encode(OpCall& op) const;
  static ExpertLoadArgs decode(const OpCall& op);
};

// kAddSumRows, kMoeAuxLoss, kMoeAuxLossBackward (NOTE [Auxiliary load-balancing loss] in
// core/model/moe_aux_loss.h): N tokens' fp32 scores over E experts; `value` the loss's or the
// gradient's factor. iargs {tokens, experts}, fargs {value}
struct AuxLossArgs {
  int64_t tokens = 0, experts = 0;
  double value = 0;

  void encode(OpCall& op) const {
    op.iargs = {tokens, experts};
    op.fargs = {value};
  }
  static AuxLossArgs decode(const OpCall& op);
};

// kArgsort, kFloorDivide, kGatherRows, kScatterRows, kIndexAddRows, kPadRow: rows of `width`
// elements; `rows` is the row count of the indexed tensor (the gather's source, the scatter's
// output); `divisor` the floor division's. iargs {rows, width, divisor}
struct RowIndexArgs {
  int64_t rows = 0, width = 1, divisor = 1;

  void encode(OpCall& op) const { op.iargs = {rows, width, divisor}; }
  static RowIndexArgs decode(const OpCall& op);
};

// kPermuteIndices: counts [ranks * E] (sender-major: with ep the received
// num_tokens_per_expert_group, each ep rank's counts for this rank's E experts; ep = 1: [E]),
// `tokens` routed rows (N * K), E experts, each group padded to `align`;
// the permutation has `padded_rows` = round_up(tokens + E * align, align) entries.
// iargs {tokens, experts, align}
struct PermuteIndicesArgs {
  int64_t tokens = 0, experts = 0, align = 1;

  int64_t padded_rows() const;
  void encode(OpCall& op) const { op.iargs = {tokens, experts, align}; }
  static PermuteIndicesArgs decode(const OpCall& op);
};

// kGroupedMM: x [rows, k] times each expert's w [E, n, k]^T over its group -> [rows, n];
// kGroupedMMBackwardInput: (g [rows, n], w, offs) -> [rows, k]; kGroupedMMBackwardWeight:
// (g [rows, n], x [rows, k], offs) -> [E, n, k]. `computed_rows` (<= rows) are the rows inside
// the groups (the FLOPs; the rest is padding no group covers). iargs {rows, k, n, experts,
// computed_rows}
struct GroupedMmArgs {
  int64_t rows = 0, k = 0, n = 0, experts = 0, computed_rows = 0;

  void encode(OpCall& op) const { op.iargs = {rows, k, n, experts, computed_rows}; }
  static GroupedMmArgs decode(const OpCall& op);
};

}  // namespace fullshard
