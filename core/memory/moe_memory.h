#pragma once
// A mixture-of-experts model's share of the allocated peak (docs/moe.md, "Memory at the peak").
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/memory/category.h"

namespace fullshard {

// NOTE [MoE memory at the peak]: of the bytes allocated at the peak, which are the routed
// experts' parameters (their sharded and unsharded storage, and the all-gather buffers of a
// group of their own, as torchtitan fully_shards the experts with ep), gradients, optimizer
// state, and which hold routed tokens (the experts' call: the dispatch and combine all-to-all
// buffers, the permuted rows, the grouped GEMMs' outputs and their gradients, sized by the
// routing under expert parallelism). Read from each device allocation's category and name
// (`<fqn>.moe.experts...`) as the Backend makes it, so the simulator and a real run split the
// same program the same way. A flat all-gather / reduce-scatter buffer of a group mixing dense
// and expert parameters (ep 1: the block's group) is not split, and counts in none of them.
enum class MoePart : uint8_t { kExpertParams, kExpertGrads, kExpertOptimizerState, kRoutedTokens };
inline constexpr int kNumMoeParts = 4;
inline constexpr std::array<MoePart, kNumMoeParts> kAllMoeParts = {
    MoePart::kExpertParams, MoePart::kExpertGrads, MoePart::kExpertOptimizerState,
    MoePart::kRoutedTokens};
using MoeBytes = std::array<uint64_t, kNumMoeParts>;

// The part a device allocation of `category` named `what` belongs to; nullopt: none.
std::optional<MoePart> moe_part(MemCategory category, std::string_view what);

// Report keys: "expert_params", "expert_grads", "expert_optimizer_state", "routed_tokens".
std::string_view moe_part_key(MoePart p);

}  // namespace fullshard
