// Tensor parallelism in the simulator: the collectives one training step issues per process
// group, written out from torchtitan's plan as PyTorch issues them (DTensor redistributes and
// the loss-parallel handlers), and the per-mesh-dim communication report.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

using Counts = testing::TpStepCollectives;

// tiny-llama (2 blocks) on mesh [shard, tp]; collectives of program 0's last step by group.
Counts counts(int shard, int tp, bool loss_parallel, const std::string& ac) {
  return testing::tp_step_collectives("tiny-llama", shard, tp, loss_parallel, ac);
}

constexpr int L = 2;  // tiny-llama's blocks

// Per step over the tp group, with loss parallel (torchtitan's default):
//  forward:  tok_embeddings Partial -> Shard(1): 1 reduce-scatter; per block 2 all-gathers
//            (PrepareModuleInput of attention and feed_forward) and 2 reduce-scatters (wo, w2
//            outputs); output's input Shard(1) -> Replicate: 1 all-gather; loss parallel's
//            _log_softmax: all-reduce max and all-reduce sum; _nll_loss_forward: 1 all-reduce.
//  backward: every all-gather's gradient is reduce-scattered and every reduce-scatter's
//            all-gathered; the loss-parallel backward handlers issue none; each replicated norm
//            weight's Partial gradient is all-reduced (2 per block + the final norm).
TEST(TensorParallelCollectives, PerStepCountsMatchWhatPyTorchIssues) {
  const Counts c = counts(2, 2, true, "none");
  const auto& tp = c.by_group.at("tp");
  EXPECT_EQ(tp.at(CollectiveKind::kAllGather), (2 * L + 1) + (2 * L + 1));
  EXPECT_EQ(tp.at(CollectiveKind::kReduceScatter), (1 + 2 * L) + (1 + 2 * L));
  EXPECT_EQ(tp.at(CollectiveKind::kAllReduce), 3 + (2 * L + 1));
  // FSDP over the shard dim as without tp: one all-gather per unit in forward (blocks + root)
  // and in backward for the blocks (the root stays unsharded after forward by default), one
  // reduce-scatter per unit.
  const auto& sh = c.by_group.at("shard");
  EXPECT_EQ(sh.at(CollectiveKind::kAllGather), (L + 1) + L);
  EXPECT_EQ(sh.at(CollectiveKind::kReduceScatter), L + 1);
  // Clipping: tp-sharded squares over shard+tp, replicated ones over shard.
  EXPECT_EQ(c.by_group.at("shard+tp").at(CollectiveKind::kAllReduce), 1);
  EXPECT_EQ(sh.at(CollectiveKind::kAllReduce), 1);
}

// Without loss parallel the logits are all-gathered over tp (Shard(-1) -> Replicate) and the
// loss is local; its backward takes this rank's columns without a collective.
TEST(TensorParallelCollectives, WithoutLossParallelTheLogitsAreGathered) {
  const Counts c = counts(1, 2, false, "none");
  const auto& tp = c.by_group.at("tp");
  EXPECT_EQ(tp.at(CollectiveKind::kAllGather), (2 * L + 2) + (2 * L + 1));
  EXPECT_EQ(tp.at(CollectiveKind::kReduceScatter), (1 + 2 * L) + (1 + 2 * L));
  // With shard 1 the shard+tp group has the tp group's ranks, so it is that group (one
  // communicator): clipping's all-reduce of the tp-sharded squares counts here too.
  EXPECT_EQ(tp.at(CollectiveKind::kAllReduce), (2 * L + 1) + 1);
}

// Full activation checkpointing recomputes each block's forward in backward, collectives
// included: 2 more all-gathers and 2 more reduce-scatters per block.
TEST(TensorParallelCollectives, FullCheckpointingRepeatsTheBlocksCollectives) {
  const Counts none = counts(2, 2, true, "none"), full = counts(2, 2, true, "full");
  const auto& a = none.by_group.at("tp");
  const auto& b = full.by_group.at("tp");
  EXPECT_EQ(b.at(CollectiveKind::kAllGather), a.at(CollectiveKind::kAllGather) + 2 * L);
  EXPECT_EQ(b.at(CollectiveKind::kReduceScatter), a.at(CollectiveKind::kReduceScatter) + 2 * L);
  EXPECT_EQ(b.at(CollectiveKind::kAllReduce), a.at(CollectiveKind::kAllReduce));
}

// tp collectives run on the compute stream: all of their time is exposed, and the report
// splits communication by mesh dim.
TEST(TensorParallelCollectives, TpCommunicationIsReportedAndExposed) {
  const Counts c = counts(2, 2, true, "none");
  const auto& s = c.report.last_step;
  const double tp = s.comm_by_dim_s[static_cast<size_t>(MeshDimKind::kTp)];
  EXPECT_GT(tp, 0);
  EXPECT_NEAR(s.exposed_comm_by_dim_s[static_cast<size_t>(MeshDimKind::kTp)], tp, 1e-12);
  EXPECT_GT(s.comm_by_dim_s[static_cast<size_t>(MeshDimKind::kShard)], 0);
  EXPECT_EQ(s.comm_by_dim_s[static_cast<size_t>(MeshDimKind::kReplicate)], 0);
  EXPECT_GE(s.exposed_comm_s + 1e-12, tp);
}

}  // namespace
}  // namespace fullshard
