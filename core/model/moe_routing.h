#pragma once
// The routing assumption the recorded program uses for its data-dependent costs (docs/moe.md):
// how many rows each expert's group gets, padded as torchtitan pads them for torch._grouped_mm.
#include <cstdint>
#include <vector>

#include "core/model/moe_config.h"

namespace fullshard {

// NOTE [MoE routing assumption]: with ep = 1 every MoE tensor has a static shape (torchtitan
// pads the permuted tokens to round_up(N K + E align, align) rows whatever the routing), so
// memory never depends on routing; only the grouped GEMMs' FLOPs do (the rows inside the
// groups). The program is recorded with balanced routing: N K routed tokens spread evenly,
// the first (N K mod E) experts one more; training.moe_routing {"hot_expert_factor": k} gives
// the hottest expert k times its share instead (skewed_tokens_per_expert), and a recorded run's
// histograms replace it call by call (NOTE [Recorded routing] in moe_routing_record.h).
std::vector<int64_t> balanced_tokens_per_expert(int64_t routed_tokens, int64_t experts);

// `tokens` tokens each routed to `top_k` experts, the hottest expert (expert 0) getting
// `hot_factor` times its balanced share (at most every token: a token picks an expert once),
// the rest balanced over the others. hot_factor 1: balanced_tokens_per_expert; hot_factor
// `experts` (the limit, "worst"): every token picks experts 0 .. top_k - 1 (NOTE [Worst-case
// routing] in simulator/worst_routing.h).
std::vector<int64_t> skewed_tokens_per_expert(int64_t tokens, int64_t top_k, int64_t experts,
                                              double hot_factor);

// NOTE [Expert load]: a routing statistic that carries to another mesh, batch or sequence
// length, where a recorded run (NOTE [Recorded routing]) replays only its own: each expert's
// share of the routed tokens (training.moe_routing {"expert_load": [...]}, or the mean or the
// hottest call of a recorded run's histograms). Every rank routes its N tokens x top_k by it:
// expert e gets N K share_e, rounded by largest remainder (ties to the lower expert), and at
// most N (a token picks an expert once); what the cap takes is spread over the uncapped
// experts in proportion to their shares, until nothing is left. Balanced shares give
// balanced_tokens_per_expert's counts; one expert's share of 1 with top_k 1 is the worst case.
std::vector<int64_t> loaded_tokens_per_expert(int64_t tokens, int64_t top_k,
                                              const std::vector<double>& shares);

// NOTE [Capacity factor]: torchtitan routes dropless; Megatron-LM (get_capacity and
// apply_router_token_dropping in megatron/core/transformer/moe/moe_utils.py at
// NVIDIA/Megatron-LM@d98e8a6), DeepSpeed and Switch Transformer cap each expert at
// capacity = ceil(N K / E x capacity_factor) of a rank's N tokens routed K ways (at most N: a
// token picks an expert once), dropped on the rank before any dispatch. An expert keeps the
// `capacity` of its slots with the highest routing score, ties to the lower token ("probs",
// Megatron's default), or its first `capacity` tokens ("position"); a dropped slot's index
// becomes E (kExpertCapacity), outside every histogram and sorted after every kept slot. Its
// row is never computed or sent; the combine still sums every token's K slots, a dropped one's
// expert output being zero (its score stays, and its gradient through that zero output is zero,
// as Megatron's probs x mask). So each expert's count is capped at capacity: the grouped GEMMs'
// rows and, with ep > 1, the all-to-all and every buffer after it are bounded whatever the
// router does (a rank receives at most ep x min(N min(K, E/ep), E/ep x capacity) rows).
// capacity_factor 0 (dropless): `tokens`.
int64_t expert_capacity(const MoeConfig& m, int64_t tokens);
// Each count capped at `capacity`: what the experts keep of a histogram.
std::vector<int64_t> capped_tokens_per_expert(std::vector<int64_t> counts, int64_t capacity);

// The histogram the program assumes for a rank routing `tokens` tokens: by expert_load when
// given, else by hot_expert_factor (skewed_tokens_per_expert); with a capacity factor, capped
// at the capacity, and the worst routing (hot_expert_factor num_experts) fills as many of ep
// rank 0's E / ep experts as the tokens can (each token's top-k spread over them: what fills
// the most capacity), since a capped expert no longer takes every token.
std::vector<int64_t> assumed_tokens_per_expert(const MoeConfig& m, int64_t tokens, int ep = 1);

// torchtitan's generate_permute_indices: each group at least `align` rows (an empty expert
// too), rounded up to a multiple of `align`; the sum of the groups.
int64_t grouped_rows(const std::vector<int64_t>& tokens_per_expert, int64_t align);

// NOTE [Expert-parallel routing]: with ep > 1 a rank sends each ep rank the tokens it routed to
// that rank's experts and receives what every ep rank routed to its own; the all-to-all's
// output (and everything after it) is as large as what it receives, so routing moves memory,
// and ranks differ. The routing assumption holds on every rank (each routes its N tokens with
// the same histogram), so ep rank j receives ep x (the tokens one rank routes to j's experts):
// under a skew the rank holding the hottest expert (ep index 0) receives the most.
struct EpRouting {
  std::vector<int64_t> send_rows;                // tokens to each ep rank (all_to_all input_splits)
  std::vector<int64_t> recv_rows;                // tokens from each ep rank (output_splits)
  std::vector<int64_t> local_tokens_per_expert;  // this rank's experts, summed over the sources
};
// `tokens_per_expert`: one rank's routing over all E experts, assumed on every ep rank; E % ep == 0.
EpRouting ep_routing(const std::vector<int64_t>& tokens_per_expert, int ep, int ep_index);
// The same from each ep rank's own routing (`peers`, in ep group order, NOTE [Recorded routing]
// in moe_routing_record.h): rank j sends peer i the tokens it routed to i's experts and receives
// what each peer routed to its own.
EpRouting ep_routing(const std::vector<std::vector<int64_t>>& peers, int ep_index);

// torchtitan's _permute: the permuted buffer's rows, round_up(routed + experts * align, align).
int64_t permuted_rows(int64_t routed_tokens, int64_t experts, int64_t align);

}  // namespace fullshard
