// NOTE [MoE memory at the peak] (core/memory/moe_memory.h): an allocation is the routed experts'
// or a routed token buffer by its category and its name under `<fqn>.moe.experts`; the shared
// experts, the router and dense layers are none of them, and the optimizer's temporaries of an
// expert weight count as its optimizer state.
#include <gtest/gtest.h>

#include "core/memory/moe_memory.h"

namespace fullshard {
namespace {

TEST(MoeMemory, PartsFollowTheCategoryUnderTheExpertsModule) {
  EXPECT_EQ(moe_part(MemCategory::kShardedParam, "layers.0.moe.experts.w1 (sharded)"),
            MoePart::kExpertParams);
  EXPECT_EQ(moe_part(MemCategory::kAllGather, "layers.3.moe.experts all_gather_output"),
            MoePart::kExpertParams);
  EXPECT_EQ(moe_part(MemCategory::kReduceScatter, "layers.3.moe.experts reduce_scatter_input"),
            MoePart::kExpertGrads);
  EXPECT_EQ(moe_part(MemCategory::kUnshardedGrad, "layers.0.moe.experts.w2.grad"),
            MoePart::kExpertGrads);
  EXPECT_EQ(moe_part(MemCategory::kOptimizerState, "layers.0.moe.experts.w3 exp_avg"),
            MoePart::kExpertOptimizerState);
  EXPECT_EQ(moe_part(MemCategory::kTemporary, "layers.0.moe.experts.w3 exp_avg_sq_sqrt"),
            MoePart::kExpertOptimizerState);
  EXPECT_EQ(moe_part(MemCategory::kActivation, "layers.1.moe.experts.dispatch"),
            MoePart::kRoutedTokens);
  EXPECT_EQ(moe_part(MemCategory::kTemporary, "layers.1.moe.experts.w1 grad_input"),
            MoePart::kRoutedTokens);
}

TEST(MoeMemory, EverythingElseIsNone) {
  EXPECT_FALSE(moe_part(MemCategory::kShardedParam, "layers.0.moe.shared_experts.w1.weight"));
  EXPECT_FALSE(moe_part(MemCategory::kActivation, "layers.0.moe.router.softmax"));
  EXPECT_FALSE(moe_part(MemCategory::kActivation, "layers.0.moe.routed_input"));
  EXPECT_FALSE(moe_part(MemCategory::kAllGather, "layers.0 all_gather_output"));  // mixed group
  EXPECT_FALSE(moe_part(MemCategory::kActivation, "layers.0.moe.expertsx"));
  EXPECT_FALSE(moe_part(MemCategory::kWorkspace, "layers.0.moe.experts cublas"));
  EXPECT_FALSE(moe_part(MemCategory::kShardedParam, "layers.0.feed_forward.w1.weight"));
}

TEST(MoeMemory, KeysNameEveryPart) {
  EXPECT_EQ(moe_part_key(MoePart::kExpertParams), "expert_params");
  EXPECT_EQ(moe_part_key(MoePart::kExpertGrads), "expert_grads");
  EXPECT_EQ(moe_part_key(MoePart::kExpertOptimizerState), "expert_optimizer_state");
  EXPECT_EQ(moe_part_key(MoePart::kRoutedTokens), "routed_tokens");
}

}  // namespace
}  // namespace fullshard
