// FSDP2 behaviour through the simulator: collective counts per step equal FSDP2's
// (test_fully_shard_comm / test_fully_shard_training), closed-form memory to the byte,
// steady state across steps, OOM as a result, determinism, rank classes.
#include <gtest/gtest.h>

#include "core/fsdp/fully_shard.h"
#include "core/model/transformer.h"
#include "simulator/report.h"
#include "simulator/sim_backend.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

int count(const sim::SimulationReport& r, CollectiveKind k) {
  return r.classes.at(0).collectives_per_step[static_cast<int>(k)];
}

sim::SimulationReport run(const TinyOptions& o, bool all_ranks = true) {
  sim::SimulateOptions so;
  so.all_ranks = all_ranks;
  auto r = sim::simulate_scenario(tiny_scenario(o), so);
  EXPECT_TRUE(r.problems.empty()) << problems_text(r);
  EXPECT_FALSE(r.out_of_memory);
  return r;
}

uint64_t r512(uint64_t b) { return (b + 511) / 512 * 512; }

}  // namespace

// tiny-llama has 2 blocks; the root holds the embedding, the final norm and the output.
constexpr int kBlocks = 2;

TEST(CollectiveCounts, DefaultReshardRootKeepsParams) {
  TinyOptions o;
  o.mesh = {4};
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather),
            (kBlocks + 1) + kBlocks);  // fwd blocks+1, bwd blocks
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), kBlocks + 1);
  EXPECT_EQ(count(r, CollectiveKind::kAllReduce), 1);  // clip_grad_norm over the shard group
}

TEST(CollectiveCounts, ExplicitTrueAlsoReshardsRoot) {
  TinyOptions o;
  o.mesh = {4};
  o.reshard_after_forward = true;
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather),
            2 * (kBlocks + 1));  // expected_all_gather_count += blocks + 1
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), kBlocks + 1);
}

TEST(CollectiveCounts, FalseDoesNoBackwardAllGather) {
  TinyOptions o;
  o.mesh = {4};
  o.reshard_after_forward = false;
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather), kBlocks + 1);
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), kBlocks + 1);
}

TEST(CollectiveCounts, IntReshardGathersFromPostForwardShards) {
  TinyOptions o;
  o.mesh = {4};
  o.reshard_after_forward = 2;
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather), 2 * (kBlocks + 1));
  // int N == 1 is False, N == W is True.
  o.reshard_after_forward = 1;
  EXPECT_EQ(count(run(o), CollectiveKind::kAllGather), kBlocks + 1);
  o.reshard_after_forward = 4;
  EXPECT_EQ(count(run(o), CollectiveKind::kAllGather), 2 * (kBlocks + 1));
}

// torchtitan's 2024 policy (NOTE [Per-unit options]): the last block stays unsharded from its
// forward to its backward, so backward all-gathers one block fewer.
TEST(CollectiveCounts, PerUnitLastBlockKeepsItsParams) {
  TinyOptions o;
  o.mesh = {4};
  o.per_unit = {{"layers.-1", {{"reshard_after_forward", false}}}};
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather), (kBlocks + 1) + (kBlocks - 1));
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), kBlocks + 1);
  // An explicit True for the root alone adds the root's backward all-gather.
  o.per_unit = {{"root", {{"reshard_after_forward", true}}}};
  EXPECT_EQ(count(run(o), CollectiveKind::kAllGather), 2 * (kBlocks + 1));
  // Every unit False but block 0, which reshards to pairs (int 2 of 4).
  o.reshard_after_forward = false;
  o.per_unit = {{"layers.0", {{"reshard_after_forward", 2}}}};
  EXPECT_EQ(count(run(o), CollectiveKind::kAllGather), (kBlocks + 1) + 1);
}

// Keeping a unit unsharded raises the memory between its forward and backward by the unit's
// unsharded parameters, never lowers it; the default (null) root equals an explicit false.
TEST(CollectiveCounts, PerUnitOverridesMoveThePeakTheRightWay) {
  TinyOptions o;
  o.mesh = {4};
  const auto base = run(o, false).classes.at(0).peak_allocated_bytes;
  o.per_unit = {{"root", {{"reshard_after_forward", false}}}};
  EXPECT_EQ(run(o, false).classes.at(0).peak_allocated_bytes, base);
  o.per_unit = {{"layers.0", {{"reshard_after_forward", false}}}};
  EXPECT_GT(run(o, false).classes.at(0).peak_allocated_bytes, base);
}

// torchtitan's unit layout (fsdp.units "embed_blocks_head": tok_embeddings, each block,
// fully_shard([norm, output]) with reshard_after_forward=False, the root without parameters)
// and its chunked loss. Counts of the last step (the second), written out:
//   forward:  tok_embeddings 1, blocks 2, [norm, output] 1 at the norm's pre-forward (step 1's
//             loss loop set the unit's reshard_after_forward to True, so the root's
//             post-forward, completing the unit, reshards it) -> 4
//   loss:     lm_head.unshard() before the chunks -> 1
//   backward: [norm, output] 1 (resharded after the loop), blocks 2, tok_embeddings 1 -> 4
// and one reduce-scatter per unit: [norm, output] reduces output and norm gradients together
// after the norm's backward (post-backward hooked once per pass, NOTE [Grouped units]).
// Without the chunked loss the unit stays unsharded from forward to backward.
TEST(CollectiveCounts, EmbedBlocksHeadUnitsAndTheChunkedLoss) {
  for (bool chunked : {false, true}) {
    TinyOptions o;
    o.mesh = {4};
    o.units = "embed_blocks_head";
    o.per_unit = {{"output", {{"reshard_after_forward", false}}}};
    json j = tiny_scenario_json(o);
    if (chunked)
      j["model"] = {{"name", "tiny-llama"},
                    {"implementation", {{"loss", "chunked"}, {"loss_chunks", 4}}}};
    sim::SimulateOptions so;
    so.all_ranks = true;
    auto r = sim::simulate_scenario(parse_scenario(j), so);
    ASSERT_TRUE(r.problems.empty()) << problems_text(r);
    EXPECT_EQ(count(r, CollectiveKind::kAllGather), chunked ? 9 : 1 + kBlocks + 1 + kBlocks + 1)
        << chunked;
    EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), 1 + kBlocks + 1) << chunked;
  }
}

// The same layout for a Llama with tied embeddings: torchtitan's
// fully_shard([tok_embeddings, norm, output], reshard_after_forward=False) (NOTE [Tied
// embeddings unit] in core/scenario/scenario_checks.cc). Counts of the last step, written out:
//   without the chunked loss:
//     forward:  the tied unit 1 at the embedding's pre-forward (the norm's and the output's
//               pre-forwards find it unsharded: one all-gather of the one tied weight), blocks 2
//     backward: the tied unit 0 (unsharded since forward), blocks 2            -> 5 all-gathers
//   with it (step 1's loss loop set the unit's reshard_after_forward to True):
//     forward:  the tied unit 1, blocks 2; the root's post-forward completes the unit (the
//               output did not run) and reshards it
//     loss:     lm_head.unshard() before the chunks -> 1
//     backward: the tied unit 1 (resharded after the loop; the embedding's backward needs it
//               unsharded to take the gradient), blocks 2                      -> 7 all-gathers
// and one reduce-scatter per unit: the tied unit's gradient (output and embedding uses summed,
// with the norm's) is reduced once, from the root's final callback (its pass starts at the
// embedding, whose token ids need no gradient, so no post-backward hook runs earlier).
TEST(CollectiveCounts, TiedEmbeddingsUnitAllGathersOncePerForward) {
  for (bool chunked : {false, true}) {
    for (const char* key : {"output", "tok_embeddings", "norm"}) {  // each names the tied unit
      TinyOptions o;
      o.mesh = {4};
      o.units = "embed_blocks_head";
      o.per_unit = {{key, {{"reshard_after_forward", false}}}};
      json j = tiny_scenario_json(o);
      j["model"] = {{"name", "tiny-llama"}, {"tie_embeddings", true}};
      if (chunked) j["model"]["implementation"] = {{"loss", "chunked"}, {"loss_chunks", 4}};
      sim::SimulateOptions so;
      so.all_ranks = true;
      auto r = sim::simulate_scenario(parse_scenario(j), so);
      ASSERT_TRUE(r.problems.empty()) << problems_text(r);
      EXPECT_EQ(count(r, CollectiveKind::kAllGather),
                chunked ? 1 + kBlocks + 1 + 1 + kBlocks : 1 + kBlocks + kBlocks)
          << chunked << " " << key;
      EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), 1 + kBlocks) << chunked << " " << key;
    }
  }
}

TEST(CollectiveCounts, GradientAccumulationReducesOnlyOnTheLastMicroBatch) {
  TinyOptions o;
  o.mesh = {2};
  o.grad_accum_steps = 3;
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather), 3 * ((kBlocks + 1) + kBlocks));
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), kBlocks + 1);
}

TEST(CollectiveCounts, HsdpAllReducesEveryGroupOnTheReplicateDim) {
  TinyOptions o;
  o.mesh = {2, 2};
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), kBlocks + 1);
  EXPECT_EQ(count(r, CollectiveKind::kAllReduce), (kBlocks + 1) + 1);
}

TEST(CollectiveCounts, RootOnlyIsOneGroup) {
  TinyOptions o;
  o.units = "root";
  auto r = run(o);
  EXPECT_EQ(count(r, CollectiveKind::kAllGather), 1);
  EXPECT_EQ(count(r, CollectiveKind::kReduceScatter), 1);
}

// After a step, only the padded sharded parameters and AdamW's states (zeros_like of the
// unpadded local shard) remain: sum r512(4 * ceil(d0/W) * rest) + 2 * sum r512(4 * rows_r * rest).
TEST(ClosedForm, SteadyStateIsShardedParamsPlusOptimizerStates) {
  for (int world : {1, 2, 3, 4, 5}) {
    TinyOptions o;
    o.mesh = {world};
    o.steps = 3;
    auto r = run(o);
    Transformer model(tiny_scenario(o).model);
    for (const auto& c : r.classes) {
      const int rank = c.representative;
      uint64_t expect = 0;
      model.root().for_each_param([&](Param& p) {
        int64_t rest = 1;
        for (size_t i = 1; i < p.shape.size(); ++i) rest *= p.shape[i];
        int64_t per = (p.shape[0] + world - 1) / world;
        int64_t mine = std::max<int64_t>(0, std::min<int64_t>(per, p.shape[0] - per * rank));
        expect += r512(4 * per * rest) + 2 * r512(4 * mine * rest);
      });
      ASSERT_EQ(c.allocated_after_step.size(), 3u);
      EXPECT_EQ(c.allocated_after_step[0], expect) << "world " << world << " rank " << rank;
      EXPECT_EQ(c.allocated_after_step[1], expect);
      EXPECT_EQ(c.allocated_after_step[2], expect);
    }
  }
}

// Two units of one [R, C] fp32 parameter each under a parameterless root, forward only
// with reshard_after_forward=True. With implicit prefetch the first unit's all-gather
// output lives until the second unit's copy-out, so the peak is
//   S + max(AG0 + U0, AG0 + AG1, AG1 + U1)
// where S = 2 * r512(4 * ceil(R/W) * C), AG = r512(4 * W * ceil(R/W) * C) = U. Over one rank
// there is no all-gather output (NOTE [World-size-1 shortcut] in core/fsdp/fsdp_param_group.cc):
// the peak is S + U.
TEST(ClosedForm, ForwardPeakWithImplicitPrefetch) {
  for (int world : {1, 2, 3, 4}) {
    const int64_t R = 1000, C = 3;
    sim::GroupRegistry groups;
    sim::SimBackend b(0, world, AllocatorOptions{}, groups);
    Module root;
    root.kind = "Root";
    Module* u0 = root.add_child("u0", "Linear");
    u0->add_param("weight", {R, C});
    Module* u1 = root.add_child("u1", "Linear");
    u1->add_param("weight", {R, C});
    std::vector<int> ranks(world);
    for (int i = 0; i < world; ++i) ranks[i] = i;
    FSDPRuntime fsdp(b, MeshInfo{ProcessGroup{"shard", ranks}, std::nullopt});
    FullyShardOptions o;
    o.reshard_after_forward.kind = ReshardAfterForward::Kind::kTrue;
    fsdp.fully_shard(*u0, o, false);
    fsdp.fully_shard(*u1, o, false);
    fsdp.fully_shard(root, o, true);
    const uint64_t per = static_cast<uint64_t>((R + world - 1) / world) * C * 4;
    const uint64_t S = 2 * r512(per), AG = r512(per * world), U = AG;
    EXPECT_EQ(b.memory().current().allocated_bytes, S);
    ExecContext c(b, nullptr, &fsdp);
    auto identity = [](ExecContext&, Value v) { return v; };
    c.call_module(root, Value{}, [&](ExecContext& rc, Value x) {
      x = rc.call_module(*u0, x, identity);
      // U0 freed, AG0 deferred (none over one rank)
      EXPECT_EQ(b.memory().current().allocated_bytes, S + (world == 1 ? 0 : AG));
      x = rc.call_module(*u1, x, identity);
      return x;
    });
    EXPECT_EQ(b.memory().current().allocated_bytes, S);  // root post-forward frees AG1
    EXPECT_EQ(b.memory().at_peak_allocated().allocated_bytes,
              world == 1 ? S + U : S + std::max({AG + U, AG + AG, AG + U}))
        << "world " << world;
  }
}

TEST(Simulate, OutOfMemoryIsAResultWithBreakdownAndTimeline) {
  TinyOptions o;
  o.model = "gpt2-124m";
  o.seq = 128;
  o.hardware_extra = {{"memory_gib", 1}};
  sim::SimulateOptions so;
  auto r = sim::simulate_scenario(tiny_scenario(o), so);
  ASSERT_TRUE(r.out_of_memory);
  const auto& c = r.classes.at(0);
  ASSERT_TRUE(c.oom.has_value());
  EXPECT_GT(c.oom->requested_bytes, 0u);
  EXPECT_FALSE(c.oom->what.empty());
  EXPECT_LE(c.oom->at_failure.reserved_bytes, c.oom->capacity_bytes);
  uint64_t sum = 0;
  for (uint64_t v : c.oom->at_failure.by_category) sum += v;
  EXPECT_EQ(sum, c.oom->at_failure.allocated_bytes);
  EXPECT_FALSE(c.timeline.empty());
  EXPECT_TRUE(r.problems.empty()) << problems_text(r);
  auto j = sim::report_json(r);
  EXPECT_TRUE(j["out_of_memory"].get<bool>());
  EXPECT_TRUE(j["rank_classes"][0].contains("oom"));
}

TEST(Simulate, IdenticalInputGivesIdenticalReport) {
  TinyOptions o;
  o.mesh = {3};
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  auto a = sim::report_json(run(o)).dump();
  auto b = sim::report_json(run(o)).dump();
  EXPECT_EQ(a, b);
}

TEST(Simulate, RankClassesMatchPerRankSimulation) {
  TinyOptions o;
  o.mesh = {3};  // vocab 256 over 3 ranks is uneven: 86, 86, 84 rows
  auto classes = run(o, false);
  auto all = run(o, true);
  EXPECT_EQ(classes.classes.size(), 2u);
  ASSERT_EQ(all.classes.size(), 3u);
  for (const auto& c : classes.classes)
    for (int rk : c.ranks) {
      EXPECT_EQ(all.classes[rk].peak_allocated_bytes, c.peak_allocated_bytes);
      EXPECT_EQ(all.classes[rk].peak_reserved_bytes, c.peak_reserved_bytes);
      EXPECT_EQ(all.classes[rk].allocated_after_step, c.allocated_after_step);
    }
  EXPECT_DOUBLE_EQ(classes.step_time_s, all.step_time_s);
}

TEST(Simulate, ReportHasTheDocumentedKeys) {
  auto j = sim::report_json(run(TinyOptions{}));
  for (const char* k :
       {"ranks", "step_time_s", "exposed_comm_s", "tokens_per_s_per_gpu", "mfu", "memory_timeline"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const auto& r : j["ranks"])
    for (const char* k :
         {"rank", "peak_allocated_bytes", "peak_reserved_bytes", "breakdown_at_peak"})
      EXPECT_TRUE(r.contains(k)) << k;
  const auto& tl = j["memory_timeline"][0];
  EXPECT_EQ(tl["time_s"].size(), tl["allocated_bytes"].size());
  EXPECT_EQ(tl["time_s"].size(), tl["by_category"]["activations"].size());
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
}

TEST(Simulate, TimelineIsOrderedAndKeepsThePeakWhenDownsampled) {
  TinyOptions o;
  o.mesh = {2};
  o.steps = 3;
  for (size_t max_points : {size_t{4000}, size_t{16}}) {
    sim::SimulateOptions so;
    so.max_timeline_points = max_points;
    auto r = sim::simulate_scenario(tiny_scenario(o), so);
    for (const auto& c : r.classes) {
      ASSERT_FALSE(c.timeline.empty());
      EXPECT_LE(c.timeline.size(), std::max<size_t>(max_points, 4));
      uint64_t peak = 0;
      for (size_t i = 0; i < c.timeline.size(); ++i) {
        peak = std::max(peak, c.timeline[i].allocated_bytes);
        if (i) {
          EXPECT_LE(c.timeline[i - 1].time_s, c.timeline[i].time_s);
        }
        uint64_t sum = 0;
        for (uint64_t v : c.timeline[i].by_category) sum += v;
        EXPECT_EQ(sum, c.timeline[i].allocated_bytes);
      }
      EXPECT_EQ(peak, c.peak_allocated_bytes) << "max points " << max_points;
      EXPECT_LE(c.timeline.back().time_s, c.end_time_s);
      EXPECT_GT(c.timeline.back().time_s, 0);
    }
  }
}
