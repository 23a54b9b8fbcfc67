// Expert parallelism in the simulator (docs/moe.md, "Expert parallelism"): the ep and efsdp groups
// torchtitan's ParallelDims builds, the routed experts' shards (Shard(0) over efsdp, Shard(1) when
// efsdp exceeds the experts per rank) checked to the byte against a hand computation, the
// all-to-alls' count and bytes, per-rank memory under routing skew (by class and every rank
// alike), and the one-line errors of expert_parallel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string_view>

#include "core/mesh/expert_mesh.h"
#include "core/model/moe_dispatch.h"
#include "core/model/moe_routing.h"
#include "core/model/moe_routing_record.h"
#include "core/runtime/moe_args.h"
#include "core/runtime/op_args.h"
#include "core/report/rank_report.h"
#include "simulator/report.h"
#include "tests/gpu/recorded_ops.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

json tiny_moe_ep(int ep, std::vector<int> mesh, json training = json::object()) {
  json extra = {{"training", training}};
  if (ep > 0) extra["expert_parallel"] = {{"degree", ep}};
  return recorded_ops::scenario_json("tiny-moe", nullptr, mesh, extra);
}

TEST(ExpertMesh, GroupsAsTorchtitansSparseMesh) {
  ProcessGroup shard{"shard", {0, 1, 2, 3, 4, 5, 6, 7}};
  const ExpertGroups g = expert_groups(shard, 5, 2);
  EXPECT_EQ(g.ep.ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(g.efsdp.ranks, (std::vector<int>{1, 3, 5, 7}));
  // HSDP: the second replica's shard group is ranks 8..15.
  ProcessGroup shard2{"shard", {8, 9, 10, 11, 12, 13, 14, 15}};
  const ExpertGroups h = expert_groups(shard2, 14, 4);
  EXPECT_EQ(h.ep.ranks, (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(h.efsdp.ranks, (std::vector<int>{10, 14}));
  json hsdp = tiny_moe_ep(2, {8});
  hsdp["fsdp"]["mesh"] = {{"shape", {2, 4}}, {"dim_names", {"replicate", "shard"}}};
  const Scenario s = parse_scenario(hsdp);
  const MeshInfo m = mesh_info_for(s, 6);
  EXPECT_EQ(m.ep_group->ranks, (std::vector<int>{6, 7}));
  EXPECT_EQ(m.efsdp_group->ranks, (std::vector<int>{4, 6}));
  EXPECT_EQ(m.replicate_group->ranks, (std::vector<int>{2, 6}));
}

// tiny-moe: 4 experts, w1 / w3 [E, 32, 64], w2 [E, 64, 32], 2 MoE layers, fp32 shards. On 8
// ranks: ep 1 shards each weight's 4 experts over 8 ranks on dim 0 (ceil(4 / 8) = 1 padded
// expert, 2,048 elements per rank); ep 2 leaves 2 experts per rank and efsdp 4 > 2 gives Shard(1)
// (2 x 32 / 4 x 64 = 1,024); ep 4, 1 expert, efsdp 2: Shard(1) again (1 x 16 x 64 = 1,024).
TEST(ExpertParallelSharding, ExpertShardsToTheByte) {
  auto sharded = [](int ep) {
    const auto r = sim::simulate_scenario(parse_scenario(tiny_moe_ep(ep, {8})));
    EXPECT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
    // The classes differ in real rows only (the router gate's 4 rows over 8 ranks): every rank
    // stores the same padded shards.
    const uint64_t bytes =
        r.classes.at(0).breakdown_at_peak[static_cast<size_t>(MemCategory::kShardedParam)];
    for (const auto& c : r.classes)
      EXPECT_EQ(c.breakdown_at_peak[static_cast<size_t>(MemCategory::kShardedParam)], bytes);
    return bytes;
  };
  const uint64_t base = sharded(0), ep2 = sharded(2), ep4 = sharded(4);
  const uint64_t weights = 2 * 3, fp32 = 4;
  EXPECT_EQ(base - ep2, weights * (2048 - 1024) * fp32);
  EXPECT_EQ(ep2, ep4);

  const Scenario s = parse_scenario(tiny_moe_ep(2, {8}));
  sim::GroupRegistry groups;
  recorded_ops::RecordingBackend b(s, 5, groups);
  TrainingProgram prog(b, s);
  int experts = 0;
  for (const auto& st : prog.fsdp().states()) {
    if (!st->group || st->module->kind != "GroupedExperts") continue;
    ++experts;
    EXPECT_EQ(st->group->config().shard_group.name, "efsdp");
    EXPECT_EQ(st->group->config().shard_group.ranks, (std::vector<int>{1, 3, 5, 7}));
    EXPECT_EQ(st->group->config().gradient_divide_factor, 8);
    for (FSDPParam* p : st->group->fsdp_params()) {
      EXPECT_EQ(p->shard_dim(), 1);
      EXPECT_EQ(p->padded_sharded_numel(), 1024) << p->param().fqn;
      EXPECT_EQ(p->param().global_shape().at(0), 4);
      EXPECT_EQ(p->param().ep_index, 1);  // rank 5: shard index 5, ep index 1
    }
  }
  EXPECT_EQ(experts, 2);
}

// Per MoE layer and step: the split sizes, the dispatch and the combine forward, the two
// gradients' all-to-alls backward. Balanced routing of 2 x 32 tokens x top-2 over 4 experts: 32
// each, so each rank sends 64 rows of 64 fp32 features to its peer and receives as many.
TEST(ExpertParallelDispatch, AllToAllsAndTheirBytes) {
  std::map<uint64_t, int> by_bytes;
  std::map<int64_t, int> to_peer;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs)
      if (in.type == sim::InstrType::kCollective && in.coll == CollectiveKind::kAllToAll &&
          in.step == last) {
        EXPECT_EQ(run.groups[in.group].name, "ep");
        ++by_bytes[in.coll_bytes];
        ++to_peer[in.dims[0]];
        EXPECT_EQ(in.dims[0], in.dims[1]);
      }
  };
  const auto r = sim::simulate_scenario(parse_scenario(tiny_moe_ep(2, {2})), o);
  ASSERT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
  const uint64_t tokens = 128 * 64 * 4, counts = 4 * 4;
  EXPECT_EQ(by_bytes[counts], 2);
  EXPECT_EQ(by_bytes[tokens], 8);
  EXPECT_EQ(to_peer[64 * 64 * 4], 8);
  EXPECT_EQ(to_peer[2 * 4], 2);
  EXPECT_EQ(r.classes.at(0).collectives_per_step[static_cast<int>(CollectiveKind::kAllToAll)], 10);
}

// The plots' view of expert parallelism (docs/plots.md, "Mixture of experts"): every played
// all-to-all is a span of the class, in start order, and the timeline's routed-tokens column
// (NOTE [Routed tokens in the timeline] in core/report/rank_report.h) meets moe_at_peak at the
// peak and falls back between steps (to what outlives a step: the permutation indices the
// module keeps for its combine, as torchtitan's ExpertParallel keeps permuted_indices).
TEST(ExpertParallelPlots, AllToAllSpansAndRoutedTokensInTheTimeline) {
  const auto r = sim::simulate_scenario(parse_scenario(tiny_moe_ep(2, {2}, {{"steps", 3}})));
  ASSERT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
  const RankReport& c = r.classes.at(0);
  const int per_step = c.collectives_per_step[static_cast<int>(CollectiveKind::kAllToAll)];
  ASSERT_EQ(per_step, 10);
  ASSERT_EQ(c.all_to_all_spans.size(), static_cast<size_t>(per_step) * 3);
  for (size_t i = 0; i < c.all_to_all_spans.size(); ++i) {
    const InFlightOp& a = c.all_to_all_spans[i];
    EXPECT_NE(a.name.find(".moe.experts."), std::string::npos) << a.name;
    EXPECT_NE(a.name.find("all_to_all"), std::string::npos) << a.name;
    EXPECT_LT(a.start_s, a.end_s) << a.name;
    EXPECT_LE(a.end_s, c.end_time_s) << a.name;
    if (i) {
      EXPECT_LE(c.all_to_all_spans[i - 1].start_s, a.start_s);
    }
  }
  ASSERT_TRUE(c.moe_at_peak);
  const uint64_t routed_at_peak = (*c.moe_at_peak)[static_cast<int>(MoePart::kRoutedTokens)];
  ASSERT_GT(routed_at_peak, 0u);
  ASSERT_FALSE(c.timeline.empty());
  size_t peak = 0, first = c.timeline.size();
  for (size_t i = 0; i < c.timeline.size(); ++i) {
    if (c.timeline[i].allocated_bytes > c.timeline[peak].allocated_bytes) peak = i;
    EXPECT_LE(c.timeline[i].routed_bytes, c.timeline[i].allocated_bytes);
    if (c.timeline[i].routed_bytes > 0) first = std::min(first, i);
  }
  EXPECT_EQ(c.timeline[peak].routed_bytes, routed_at_peak);
  uint64_t low = routed_at_peak;
  for (size_t i = first; i < c.timeline.size(); ++i)
    low = std::min(low, c.timeline[i].routed_bytes);
  EXPECT_LT(low, routed_at_peak / 16);  // each step gives its routed tokens back
  // The column travels through the report format and back.
  const RankReport back = rank_report_from_json(rank_class_json(c), rank_timeline_json(c, 0));
  EXPECT_EQ(back.all_to_all_spans.size(), c.all_to_all_spans.size());
  ASSERT_EQ(back.timeline.size(), c.timeline.size());
  EXPECT_EQ(back.timeline[peak].routed_bytes, routed_at_peak);
  // A dense model writes neither.
  const auto dense = sim::simulate_scenario(
      parse_scenario(recorded_ops::scenario_json("tiny-llama", nullptr, {2}, json::object())));
  ASSERT_TRUE(dense.ok());
  EXPECT_TRUE(dense.classes.at(0).all_to_all_spans.empty());
  const json tl = rank_timeline_json(dense.classes.at(0), 0);
  EXPECT_FALSE(tl.contains("routed_tokens_bytes"));
  EXPECT_FALSE(rank_class_json(dense.classes.at(0)).contains("all_to_all_spans"));
}

// A free gives back what its buffer's allocation took, whatever it is labelled (a measured
// run's frees carry no name), and only routed-token allocations count.
TEST(ExpertParallelPlots, RoutedTokenBytesFollowTheBufferNotTheLabel) {
  RoutedTokenBytes sum;
  CategoryBytes before{};
  auto event = [&](uint64_t id, bool alloc, MemCategory cat, int64_t bytes) {
    MemoryEvent e;
    e.buffer_id = id;
    e.is_alloc = alloc;
    e.category = cat;
    e.by_category = before;
    e.by_category[static_cast<int>(cat)] += bytes;
    return e;
  };
  auto step = [&](const MemoryEvent& e, std::string_view what) {
    const uint64_t v = sum.after(e, before, what);
    before = e.by_category;
    return v;
  };
  EXPECT_EQ(step(event(1, true, MemCategory::kActivation, 512), "layers.0.moe.experts.dispatch"),
            512u);
  EXPECT_EQ(step(event(2, true, MemCategory::kActivation, 256), "layers.0.attention.wq"), 512u);
  EXPECT_EQ(step(event(3, true, MemCategory::kShardedParam, 64), "layers.0.moe.experts.w1"), 512u);
  EXPECT_EQ(
      step(event(4, true, MemCategory::kTemporary, 128), "layers.0.moe.experts.w1 grad_input"),
      640u);
  EXPECT_EQ(step(event(1, false, MemCategory::kActivation, -512), ""), 128u);
  EXPECT_EQ(step(event(2, false, MemCategory::kActivation, -256), "layers.0.moe.experts.x"), 128u);
  EXPECT_EQ(step(event(4, false, MemCategory::kTemporary, -128), "anything"), 0u);
}

// Every op of an ep = 2 program decodes as the kernels decode it: _permute gets the received
// counts of both senders ([ep * E / ep]) for this rank's 2 experts (generate_permute_indices'
// tokens_per_expert_group), which the CPU kernel lays out sender-major.
TEST(ExpertParallelDispatch, EveryOpDecodes) {
  const auto ops = recorded_ops::record(parse_scenario(tiny_moe_ep(2, {2})));
  int permutes = 0;
  for (const OpCall& op : ops) {
    validate_op_args(op);
    if (op.kind != OpKind::kPermuteIndices) continue;
    ++permutes;
    EXPECT_EQ(op.inputs[0].meta.numel(), 4) << op.name;
    EXPECT_EQ(PermuteIndicesArgs::decode(op).experts, 2) << op.name;
  }
  EXPECT_EQ(permutes, 2);
}

// From each ep peer's own histogram (NOTE [Recorded routing]), a rank sends by its own and
// receives what each peer routed to its experts; with every peer alike it is the assumption's.
TEST(ExpertParallelDispatch, RecordedRoutingSendsByItsOwnAndReceivesByItsPeers) {
  const std::vector<std::vector<int64_t>> peers = {{3, 1, 0, 4}, {0, 2, 5, 1}};
  const EpRouting r0 = ep_routing(peers, 0), r1 = ep_routing(peers, 1);
  EXPECT_EQ(r0.send_rows, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(r0.recv_rows, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(r0.local_tokens_per_expert, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(r1.send_rows, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(r1.recv_rows, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(r1.local_tokens_per_expert, (std::vector<int64_t>{5, 5}));
  const std::vector<int64_t> h = skewed_tokens_per_expert(64, 2, 4, 2.0);
  for (int k = 0; k < 2; ++k) {
    const EpRouting a = ep_routing(h, 2, k), b = ep_routing({h, h}, k);
    EXPECT_EQ(a.send_rows, b.send_rows);
    EXPECT_EQ(a.recv_rows, b.recv_rows);
    EXPECT_EQ(a.local_tokens_per_expert, b.local_tokens_per_expert);
  }
}

// A recorded routing makes each step its own: the simulator plays every recorded step instead
// of extrapolating from the first ones (NOTE [Steady state] in simulator/extrapolate.cc), so a
// hot expert in the last step raises the predicted peak.
TEST(ExpertParallelDispatch, ARecordedRoutingIsPlayedStepByStep) {
  const Scenario s = parse_scenario(tiny_moe_ep(2, {2}, {{"steps", 5}}));
  const int64_t N = s.training.batch_for(0) * s.training.seq_len, K = s.model.moe.top_k,
                E = s.model.moe.num_experts;
  auto peak = [&](bool hot_last) {
    auto rec = std::make_shared<RecordedRouting>();
    rec->num_experts = E;
    rec->source = "this test";
    for (int r = 0; r < s.world_size(); ++r) {
      rec->calls.emplace_back();
      for (int step = 0; step < 5; ++step)
        for (int layer = 0; layer < 2; ++layer)  // tiny-moe's 2 MoE layers
          rec->calls.back().push_back(hot_last && step == 4
                                          ? skewed_tokens_per_expert(N, K, E, 3.0)
                                          : balanced_tokens_per_expert(N * K, E));
    }
    Scenario replay = s;
    replay.training.moe_routing_record = std::move(rec);
    const sim::SimulationReport r = sim::simulate_scenario(replay);
    EXPECT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
    uint64_t p = 0;
    for (const auto& c : r.classes) p = std::max<uint64_t>(p, c.peak_allocated_bytes);
    return p;
  };
  EXPECT_GT(peak(true), peak(false));
}

// The hottest expert (expert 0, on ep rank 0) gets twice its share: [64, 22, 21, 21] of 128
// routed rows, so rank 0 receives 2 x 86 rows and rank 1 2 x 42; rank 0's activations are
// larger. Rank classes separate them, and playing every rank gives the same peaks.
TEST(ExpertParallelDispatch, SkewMovesMemoryPerRankHonestly) {
  const EpRouting r0 = ep_routing(skewed_tokens_per_expert(64, 2, 4, 2.0), 2, 0);
  const EpRouting r1 = ep_routing(skewed_tokens_per_expert(64, 2, 4, 2.0), 2, 1);
  EXPECT_EQ(r0.send_rows, (std::vector<int64_t>{86, 42}));
  EXPECT_EQ(r0.recv_rows, (std::vector<int64_t>{86, 86}));
  EXPECT_EQ(r1.recv_rows, (std::vector<int64_t>{42, 42}));
  EXPECT_EQ(r0.local_tokens_per_expert, (std::vector<int64_t>{128, 44}));
  const Scenario s =
      parse_scenario(tiny_moe_ep(2, {2}, {{"moe_routing", {{"hot_expert_factor", 2.0}}}}));
  const auto by_class = sim::simulate_scenario(s);
  ASSERT_TRUE(by_class.ok()) << fullshard::testing::problems_text(by_class);
  ASSERT_EQ(by_class.classes.size(), 2u);
  EXPECT_EQ(by_class.classes[0].ranks, std::vector<int>{0});
  EXPECT_GT(by_class.classes[0].peak_allocated_bytes, by_class.classes[1].peak_allocated_bytes);
  sim::SimulateOptions all;
  all.all_ranks = true;
  all.record_every_rank = true;
  const auto every = sim::simulate_scenario(s, all);
  ASSERT_TRUE(every.ok()) << fullshard::testing::problems_text(every);
  for (const auto& c : every.classes)
    for (int rank : c.ranks) {
      const auto& mine = by_class.classes[rank == 0 ? 0 : 1];
      EXPECT_EQ(c.peak_allocated_bytes, mine.peak_allocated_bytes) << rank;
      EXPECT_EQ(c.peak_reserved_bytes, mine.peak_reserved_bytes) << rank;
    }
  // Balanced routing: every rank alike, one class.
  EXPECT_EQ(sim::rank_classes(parse_scenario(tiny_moe_ep(2, {4}))).size(), 1u);
}

// With "max" receive buffers (NOTE [Receive buffers] in core/scenario/scenario.h) every rank's
// dispatch output (and the vstack, the permutation and the grouped GEMMs after it) holds ep x 64
// tokens x min(top_k 2, 2 experts per rank) = 256 rows, twice the 128 that balanced routing
// sends it; the bytes on the wire (the routing assumption's splits) and the all-to-all count do
// not change, and the peak rises.
TEST(ExpertParallelDispatch, MaxReceiveBuffersHoldTheMostARankCanReceive) {
  EXPECT_EQ(max_receive_rows(64, 2, 4, 2, 64), 256);
  EXPECT_EQ(max_receive_rows(64, 3, 4, 2, 64), 256);  // at most 2 of a token's 3 experts per rank
  EXPECT_EQ(max_receive_rows(64, 1, 8, 4, 64), 256);
  json maxed = tiny_moe_ep(2, {2});
  maxed["expert_parallel"]["receive_buffers"] = "max";
  std::vector<int64_t> pad_rows[2];
  int i = 0;
  for (const json& j : {tiny_moe_ep(2, {2}), maxed}) {
    for (const OpCall& op : recorded_ops::record(parse_scenario(j)))
      if (op.kind == OpKind::kPadRow) pad_rows[i].push_back(op.inputs[0].meta.numel() / 64);
    ++i;
  }
  EXPECT_EQ(pad_rows[0], std::vector<int64_t>(4, 128));  // 2 MoE layers, forward and backward
  EXPECT_EQ(pad_rows[1], std::vector<int64_t>(4, 256));
  std::map<int64_t, int> to_peer[2];
  sim::SimulateOptions o;
  i = 0;
  o.on_played = [&](const sim::PlayedRun& run) {
    for (const auto& in : run.programs.front().instrs)
      if (in.type == sim::InstrType::kCollective && in.coll == CollectiveKind::kAllToAll)
        ++to_peer[i][in.dims[0]];
  };
  const auto routed = sim::simulate_scenario(parse_scenario(tiny_moe_ep(2, {2})), o);
  i = 1;
  const auto max = sim::simulate_scenario(parse_scenario(maxed), o);
  ASSERT_TRUE(routed.ok() && max.ok()) << fullshard::testing::problems_text(max);
  EXPECT_EQ(to_peer[0], to_peer[1]);
  EXPECT_GT(max.classes.at(0).peak_allocated_bytes, routed.classes.at(0).peak_allocated_bytes);
}

TEST(ExpertParallelChecks, OneLineErrorsNameTheField) {
  using fullshard::testing::input_error_of;
  auto err = [](const json& j) { return input_error_of([&] { parse_scenario(j); }); };
  EXPECT_NE(err(tiny_moe_ep(3, {6})).find("expert_parallel.degree"), std::string::npos);
  EXPECT_NE(err(tiny_moe_ep(3, {6})).find("does not divide the 4 experts"), std::string::npos);
  EXPECT_NE(err(tiny_moe_ep(4, {2})).find("does not divide the shard dim of 2"), std::string::npos);
  json wide = tiny_moe_ep(2, {128});
  wide["hardware"]["nodes"] = 16;
  wide["hardware"]["gpus_per_node"] = 8;
  EXPECT_NE(err(wide).find("model.moe.expert_dim 32 divisible by 64"), std::string::npos);
  json dense = recorded_ops::scenario_json("tiny-llama", nullptr, {2},
                                           {{"expert_parallel", {{"degree", 2}}}});
  EXPECT_NE(err(dense).find("the model has no experts"), std::string::npos);
  json typo = tiny_moe_ep(0, {2});
  typo["expert_parallel"] = {{"degre", 2}};
  EXPECT_NE(err(typo).find("expert_parallel"), std::string::npos);
  json raf = tiny_moe_ep(2, {2});
  raf["fsdp"]["reshard_after_forward"] = 2;
  EXPECT_NE(err(raf).find("fsdp.reshard_after_forward"), std::string::npos);
  EXPECT_NO_THROW(parse_scenario(tiny_moe_ep(1, {2})));
  json bufs = tiny_moe_ep(2, {2});
  bufs["expert_parallel"]["receive_buffers"] = "worst";
  EXPECT_NE(err(bufs).find("expert_parallel.receive_buffers: is \"worst\""), std::string::npos)
      << err(bufs);
}

}  // namespace
}  // namespace fullshard

namespace fullshard {
namespace {

// Mixtral 8x7B on 64 H100s (scenarios/mixtral-8x7b-ep8-h100.json): ep 8 leaves one expert per
// rank, Shard(1) over 8 efsdp ranks: each w1 / w2 / w3 shard is 14336 x 4096 / 8 fp32 elements,
// 29,360,128 bytes, 96 of them (32 layers x 3); every dense parameter is sharded on dim 0 over
// all 64 (ceil(d0 / 64) rows, each allocation rounded to 512 bytes). With ep 1 the same experts
// shard on dim 0 over 64 ranks: one padded expert row each, 234,881,024 bytes x 96 (21.0 GiB),
// and the first forward runs out of memory; with ep 8 it fits.
TEST(ExpertParallelSharding, MixtralOn64H100sFits) {
  const Scenario s = load_scenario_file(std::string(FULLSHARD_SOURCE_DIR) +
                                        "/scenarios/mixtral-8x7b-ep8-h100.json");
  Transformer t(s.model, {}, expert_parallel_for(s, 0));
  uint64_t dense = 0;
  t.root().for_each_param([&](Param& p) {
    if (p.ep_degree > 1) return;
    int64_t row = 1;
    for (size_t i = 1; i < p.shape.size(); ++i) row *= p.shape[i];
    const uint64_t bytes = static_cast<uint64_t>((p.shape[0] + 63) / 64 * row * 4);
    dense += (bytes + 511) / 512 * 512;
  });
  const uint64_t experts = 96ull * 14336 * 4096 / 8 * 4;
  EXPECT_EQ(experts, 96ull * 29'360'128);
  const auto r = sim::simulate_scenario(s);
  ASSERT_TRUE(r.ok()) << fullshard::testing::problems_text(r);
  EXPECT_FALSE(r.out_of_memory);
  for (const auto& k : r.classes)  // the router gate's 8 rows over 64 ranks: two classes
    EXPECT_EQ(k.breakdown_at_peak[static_cast<size_t>(MemCategory::kShardedParam)],
              dense + experts);
  const auto& c = r.classes[0];
  std::printf(
      "mixtral ep8: sharded params %.3f GiB, peak allocated %.2f GiB, reserved %.2f GiB, "
      "step %.3f s\n",
      c.breakdown_at_peak[static_cast<size_t>(MemCategory::kShardedParam)] / 1073741824.0,
      c.peak_allocated_bytes / 1073741824.0, c.peak_reserved_bytes / 1073741824.0, r.step_time_s);
  Scenario ep1 = s;
  ep1.expert_parallel.degree = 1;
  const auto r1 = sim::simulate_scenario(ep1);
  EXPECT_TRUE(r1.out_of_memory);
}

}  // namespace
}  // namespace fullshard
