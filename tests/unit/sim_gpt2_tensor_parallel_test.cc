// GPT-2's tensor-parallel plan in the simulator (NOTE [GPT-2 tensor-parallel plan] in
// core/model/tensor_parallel.cc): the collectives one training step issues per process group,
// written out from the plan as PyTorch issues them.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

using Counts = std::map<std::string, std::map<CollectiveKind, int>>;  // group name -> kind -> count

// tiny-gpt2 (2 blocks) on mesh [shard, tp]; collectives of program 0's last step by group.
Counts counts(int shard, int tp, bool loss_parallel, const std::string& ac) {
  return testing::tp_step_collectives("tiny-gpt2", shard, tp, loss_parallel, ac).by_group;
}

constexpr int L = 2;  // tiny-gpt2's blocks

// Per step over the tp group, with loss parallel:
//  forward:  wte Partial -> Shard(1): 1 reduce-scatter; per block 2 all-gathers
//            (PrepareModuleInput of attn and mlp) and 2 reduce-scatters (the c_proj outputs;
//            their replicated bias is added as bias / tp to each partial sum, no collective);
//            lm_head's input Shard(1) -> Replicate: 1 all-gather; loss parallel: 3 all-reduces.
//  backward: every all-gather's gradient is reduce-scattered and every reduce-scatter's
//            all-gathered; the Partial gradients of the replicated ln_1 / ln_2 weight and
//            bias (4 per block), ln_f's weight and bias and wpe are all-reduced, one each;
//            the c_proj biases' gradients are already Replicate (none).
TEST(Gpt2TensorParallelCollectives, PerStepCountsMatchWhatPyTorchIssues) {
  const Counts c = counts(2, 2, true, "none");
  const auto& tp = c.at("tp");
  EXPECT_EQ(tp.at(CollectiveKind::kAllGather), (2 * L + 1) + (1 + 2 * L));
  EXPECT_EQ(tp.at(CollectiveKind::kReduceScatter), (1 + 2 * L) + (2 * L + 1));
  EXPECT_EQ(tp.at(CollectiveKind::kAllReduce), 3 + (4 * L + 2 + 1));
  // FSDP over the shard dim as without tp: one all-gather per unit in forward (blocks + root)
  // and in backward for the blocks, one reduce-scatter per unit; clipping's all-reduces.
  const auto& sh = c.at("shard");
  EXPECT_EQ(sh.at(CollectiveKind::kAllGather), (L + 1) + L);
  EXPECT_EQ(sh.at(CollectiveKind::kReduceScatter), L + 1);
  EXPECT_EQ(sh.at(CollectiveKind::kAllReduce), 1);
  EXPECT_EQ(c.at("shard+tp").at(CollectiveKind::kAllReduce), 1);
}

// Without loss parallel the tied lm_head's vocab-sharded logits are all-gathered and the
// loss is local.
TEST(Gpt2TensorParallelCollectives, WithoutLossParallelTheLogitsAreGathered) {
  const Counts c = counts(1, 2, false, "none");
  const auto& tp = c.at("tp");
  EXPECT_EQ(tp.at(CollectiveKind::kAllGather), (2 * L + 2) + (1 + 2 * L));
  EXPECT_EQ(tp.at(CollectiveKind::kReduceScatter), (1 + 2 * L) + (2 * L + 1));
  // shard 1: the shard+tp group is the tp group (clipping's all-reduce counts here).
  EXPECT_EQ(tp.at(CollectiveKind::kAllReduce), (4 * L + 3) + 1);
}

// Full activation checkpointing recomputes each block's forward, its 2 all-gathers and 2
// reduce-scatters included.
TEST(Gpt2TensorParallelCollectives, FullCheckpointingRepeatsTheBlocksCollectives) {
  const Counts none = counts(2, 2, true, "none"), full = counts(2, 2, true, "full");
  const auto& a = none.at("tp");
  const auto& b = full.at("tp");
  EXPECT_EQ(b.at(CollectiveKind::kAllGather), a.at(CollectiveKind::kAllGather) + 2 * L);
  EXPECT_EQ(b.at(CollectiveKind::kReduceScatter), a.at(CollectiveKind::kReduceScatter) + 2 * L);
  EXPECT_EQ(b.at(CollectiveKind::kAllReduce), a.at(CollectiveKind::kAllReduce));
}

}  // namespace
}  // namespace fullshard
