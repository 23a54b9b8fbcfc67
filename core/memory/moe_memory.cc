#include "core/memory/moe_memory.h"

namespace fullshard {

std::optional<MoePart> moe_part(MemCategory category, std::string_view what) {
  constexpr std::string_view kExperts = ".moe.experts";
  const size_t at = what.find(kExperts);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = what.substr(at + kExperts.size());
  if (!rest.empty() && rest.front() != '.' && rest.front() != ' ') return std::nullopt;
  if (rest.find(" exp_avg") != std::string_view::npos) return MoePart::kExpertOptimizerState;
  switch (category) {
    case MemCategory::kShardedParam:
    case MemCategory::kUnshardedParam:
    case MemCategory::kAllGather: return MoePart::kExpertParams;
    case MemCategory::kShardedGrad:
    case MemCategory::kUnshardedGrad:
    case MemCategory::kReduceScatter: return MoePart::kExpertGrads;
    case MemCategory::kOptimizerState: return MoePart::kExpertOptimizerState;
    case MemCategory::kActivation:
    case MemCategory::kTemporary: return MoePart::kRoutedTokens;
    case MemCategory::kWorkspace: return std::nullopt;
  }
  return std::nullopt;
}

std::string_view moe_part_key(MoePart p) {
  switch (p) {
    case MoePart::kExpertParams: return "expert_params";
    case MoePart::kExpertGrads: return "expert_grads";
    case MoePart::kExpertOptimizerState: return "expert_optimizer_state";
    case MoePart::kRoutedTokens: return "routed_tokens";
  }
  return "?";
}

}  // namespace fullshard
