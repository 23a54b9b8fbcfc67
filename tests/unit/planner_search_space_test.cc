// The planner's search space: what it enumerates (meshes, reshard values, precisions,
// offload, checkpointing, batches, allocator), the bad-input errors, and the round trip of
// every candidate through scenario JSON (parse_scenario gives the same Scenario).
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/mesh/device_mesh.h"
#include "simulator/planner/candidate_json.h"
#include "simulator/planner/search_space.h"
#include "simulator/simulate.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;
using Kind = ReshardAfterForward::Kind;

json base_json(const std::string& model, int nodes, int gpus_per_node) {
  return {{"model", model},
          {"training", {{"seq_len", 32}, {"steps", 2}}},
          {"hardware",
           {{"profile", "h100-sxm-80gb"}, {"nodes", nodes}, {"gpus_per_node", gpus_per_node}}}};
}

template <typename Fn>
void expect_flag_error(Fn fn, const std::string& flag, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError at " << flag;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.where(), flag) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "missing '" << p << "' in: " << what;
  }
}

TEST(PlannerSpace, SelectiveLayerPeriodsKeepOnePeriodPerCheckpointCount) {
  EXPECT_EQ(selective_layer_periods(1), std::vector<int>{});
  EXPECT_EQ(selective_layer_periods(2), (std::vector<int>{2}));
  EXPECT_EQ(selective_layer_periods(4), (std::vector<int>{2, 3}));  // 2 blocks, 1 block
  // 80 blocks: counts 40, 26, 20, 16, 13, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1.
  const auto p = selective_layer_periods(80);
  std::set<int64_t> counts;
  for (int k : p) counts.insert(80 / k);
  EXPECT_EQ(counts.size(), p.size());
  EXPECT_EQ(p.front(), 2);
  EXPECT_EQ(p.back(), 41);  // the smallest k that checkpoints one block
  for (int64_t k = 2; k <= 80; ++k) EXPECT_TRUE(counts.count(80 / k)) << k;
}

TEST(PlannerSpace, MeshesAreFsdpThenEveryHsdpSplit) {
  EXPECT_EQ(shard_sizes(8), (std::vector<int>{8, 4, 2, 1}));
  EXPECT_EQ(shard_sizes(1), (std::vector<int>{1}));
  EXPECT_EQ(shard_sizes(12), (std::vector<int>{12, 6, 4, 3, 2, 1}));
}

TEST(PlannerSpace, ReshardValuesAreDefaultTrueFalseAndProperDivisors) {
  auto r = reshard_options(8);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].kind, Kind::kDefault);
  EXPECT_EQ(r[1].kind, Kind::kTrue);
  EXPECT_EQ(r[2].kind, Kind::kFalse);
  EXPECT_EQ(r[3].n, 2);
  EXPECT_EQ(r[4].n, 4);
  EXPECT_EQ(reshard_options(1).size(), 3u);
  EXPECT_EQ(reshard_options(7).size(), 3u);
}

TEST(PlannerSpace, BatchesMeetTheGlobalBatch) {
  SpaceOptions o;
  o.gpus = 4;
  o.gpus_per_node = 2;
  o.global_batch = 16;
  using P = std::vector<std::pair<int64_t, int>>;
  EXPECT_EQ(batch_options(o, o.gpus), (P{{4, 1}, {2, 2}, {1, 4}}));
  o.global_batch.reset();
  o.micro_batches = {1, 2};
  EXPECT_EQ(batch_options(o, o.gpus), (P{{1, 1}, {2, 1}}));
}

TEST(PlannerSpace, EnumerationIsTheFullProductWithoutDuplicates) {
  SpaceOptions o;
  o.gpus = 8;
  o.gpus_per_node = 4;
  o.n_layers = 4;
  o.global_batch = 16;  // 2 per GPU: (2, 1), (1, 2)
  const auto cs = enumerate_candidates(o);
  // reshard values per shard size 8, 4, 2, 1: 5, 4, 3, 3; AC: none, op, full, every 2, every 3.
  const size_t expected = (5 + 4 + 3 + 3) * 3 * 2 * 5 * 2 * 2;
  EXPECT_EQ(cs.size(), expected);
  for (size_t i = 0; i < cs.size(); ++i) {
    EXPECT_EQ(cs[i].replicate * cs[i].shard, 8);
    EXPECT_EQ(cs[i].micro_batch * cs[i].grad_accum, 2);
    if (cs[i].reshard.kind == Kind::kInt) {
      EXPECT_EQ(cs[i].shard % cs[i].reshard.n, 0);
      EXPECT_GT(cs[i].reshard.n, 1);
      EXPECT_LT(cs[i].reshard.n, cs[i].shard);
    }
    for (size_t j = i + 1; j < cs.size() && j < i + 50; ++j)
      EXPECT_FALSE(cs[i] == cs[j]) << i << " " << j;
    // Expandable off and on are adjacent (the evaluator shares their program).
    if (i % 2 == 0) {
      ASSERT_LT(i + 1, cs.size());
      Candidate on = cs[i];
      on.expandable_segments = true;
      EXPECT_FALSE(cs[i].expandable_segments);
      EXPECT_TRUE(cs[i + 1] == on);
    }
  }
  std::set<std::string> texts;
  for (const auto& c : cs) texts.insert(candidate_text(c));
  EXPECT_EQ(texts.size(), cs.size());
  EXPECT_EQ(cs.front().replicate, 1);  // FSDP first
}

TEST(PlannerSpace, BadInputNamesTheFlagAndTheFix) {
  SpaceOptions o;
  o.gpus = 12;
  o.gpus_per_node = 8;
  expect_flag_error([&] { check_space_options(o); }, "--gpus",
                    {"12", "--gpus-per-node 8", "--gpus 8 or 16"});
  o.gpus = 256;
  o.global_batch = 100;
  expect_flag_error([&] { check_space_options(o); }, "--global-batch",
                    {"100", "multiple of --gpus 256", "256"});
  o.global_batch = 300;
  expect_flag_error([&] { check_space_options(o); }, "--global-batch", {"300", "256 or 512"});
  o.global_batch = 512;
  EXPECT_NO_THROW(check_space_options(o));
  o.micro_batches = {1, 2, 1};
  expect_flag_error([&] { check_space_options(o); }, "--micro-batches", {"has 1 twice", "once"});
  o.micro_batches = {1, 2};
  o.tp_degrees = {2, 2};
  expect_flag_error([&] { check_space_options(o); }, "--tp", {"has 2 twice", "once"});
}

// Every field the simulator reads, compared.
void expect_same_scenario(const Scenario& a, const Scenario& b) {
  EXPECT_EQ(a.fsdp.mesh_shape, b.fsdp.mesh_shape);
  EXPECT_EQ(a.fsdp.mesh_dim_names, b.fsdp.mesh_dim_names);
  EXPECT_EQ(a.fsdp.reshard_after_forward.kind, b.fsdp.reshard_after_forward.kind);
  EXPECT_EQ(a.fsdp.reshard_after_forward.n, b.fsdp.reshard_after_forward.n);
  EXPECT_EQ(a.fsdp.mixed_precision.param_dtype, b.fsdp.mixed_precision.param_dtype);
  EXPECT_EQ(a.fsdp.mixed_precision.reduce_dtype, b.fsdp.mixed_precision.reduce_dtype);
  EXPECT_EQ(a.fsdp.mixed_precision.output_dtype, b.fsdp.mixed_precision.output_dtype);
  EXPECT_EQ(a.fsdp.mixed_precision.cast_forward_inputs, b.fsdp.mixed_precision.cast_forward_inputs);
  EXPECT_EQ(a.fsdp.cpu_offload, b.fsdp.cpu_offload);
  EXPECT_EQ(a.fsdp.pin_memory, b.fsdp.pin_memory);
  EXPECT_EQ(a.fsdp.units, b.fsdp.units);
  EXPECT_EQ(a.fsdp.forward_prefetch, b.fsdp.forward_prefetch);
  EXPECT_EQ(a.fsdp.backward_prefetch, b.fsdp.backward_prefetch);
  EXPECT_EQ(a.training.batch_per_rank, b.training.batch_per_rank);
  EXPECT_EQ(a.training.seq_len, b.training.seq_len);
  EXPECT_EQ(a.training.steps, b.training.steps);
  EXPECT_EQ(a.training.grad_accum_steps, b.training.grad_accum_steps);
  EXPECT_EQ(a.training.accumulation_sync, b.training.accumulation_sync);
  EXPECT_EQ(a.training.activation_checkpointing.mode, b.training.activation_checkpointing.mode);
  if (a.training.activation_checkpointing.mode == RecomputeMode::kSelectiveLayer) {
    EXPECT_EQ(a.training.activation_checkpointing.every, b.training.activation_checkpointing.every);
  }
  EXPECT_EQ(a.training.seed, b.training.seed);
  EXPECT_EQ(a.hardware.nodes, b.hardware.nodes);
  EXPECT_EQ(a.hardware.gpus_per_node, b.hardware.gpus_per_node);
  EXPECT_EQ(a.hardware.allocator.capacity_bytes, b.hardware.allocator.capacity_bytes);
  EXPECT_EQ(a.hardware.allocator.expandable_segments, b.hardware.allocator.expandable_segments);
  EXPECT_EQ(a.hardware.device.name, b.hardware.device.name);
  EXPECT_EQ(parameter_count(a.model), parameter_count(b.model));
  EXPECT_EQ(a.model.n_layers, b.model.n_layers);
}

TEST(PlannerSpace, EveryCandidateRoundTripsThroughScenarioJson) {
  const json base = base_json("tiny-llama", 2, 2);
  const Scenario base_s = parse_scenario(base);
  SpaceOptions o;
  o.gpus = 4;
  o.gpus_per_node = 2;
  o.n_layers = base_s.model.n_layers;
  o.global_batch = 8;
  for (const auto& c : enumerate_candidates(o)) {
    SCOPED_TRACE(candidate_text(c));
    const json j = candidate_scenario_json(base, c, "cand", "a candidate");
    const Scenario parsed = parse_scenario(json::parse(j.dump()));
    expect_same_scenario(parsed, candidate_scenario(base_s, c));
    EXPECT_EQ(parsed.name, "cand");
  }
}

// An HSDP base that accumulates with set_requires_all_reduce(False): FSDP candidates write
// "all" (what FSDP2 does there), so every written scenario loads.
TEST(PlannerSpace, ReduceScatterOnlyAccumulationRoundTripsOnEveryMesh) {
  json base = base_json("tiny-llama", 2, 2);
  base["fsdp"] = {{"mesh", {{"shape", {2, 2}}}}};
  base["training"]["grad_accum_steps"] = 2;
  base["training"]["grad_sync_during_accumulation"] = "reduce_scatter";
  const Scenario base_s = parse_scenario(base);
  SpaceOptions o;
  o.gpus = 4;
  o.gpus_per_node = 2;
  o.n_layers = base_s.model.n_layers;
  o.global_batch = 8;
  int hsdp = 0, fsdp = 0;
  for (const auto& c : enumerate_candidates(o)) {
    SCOPED_TRACE(candidate_text(c));
    const Scenario parsed =
        parse_scenario(json::parse(candidate_scenario_json(base, c, "cand", "").dump()));
    expect_same_scenario(parsed, candidate_scenario(base_s, c));
    EXPECT_EQ(parsed.training.accumulation_sync,
              c.hsdp() ? AccumulationSync::kReduceScatter : AccumulationSync::kAll);
    ++(c.hsdp() ? hsdp : fsdp);
  }
  EXPECT_GT(hsdp, 0);
  EXPECT_GT(fsdp, 0);
}

TEST(PlannerSpace, RoundTripKeepsUnpinnedOffloadAndOtherSettings) {
  json base = base_json("tiny-llama", 1, 4);
  base["fsdp"] = {{"cpu_offload", {{"pin_memory", false}}},
                  {"units", "blocks"},
                  {"forward_prefetch", 1},
                  {"mixed_precision", {{"cast_forward_inputs", false}}}};
  base["training"]["optimizer"] = {{"lr", 1e-3}, {"implementation", "fused"}};
  base["training"]["seed"] = 7;
  const Scenario base_s = parse_scenario(base);
  Candidate c;
  c.shard = 4;
  c.cpu_offload = true;
  c.precision = Precision::kBf16;
  const Scenario parsed = parse_scenario(candidate_scenario_json(base, c, "x", ""));
  expect_same_scenario(parsed, candidate_scenario(base_s, c));
  EXPECT_FALSE(parsed.fsdp.pin_memory);
  EXPECT_TRUE(parsed.training.optimizer.fused);
  EXPECT_EQ(parsed.fsdp.forward_prefetch, 1);
}

// NOTE [Chunked loss candidates] (simulator/planner/search_space.cc): every candidate of a
// chunked-loss base is a program PyTorch runs (a chunk count dividing its tokens; with the output
// in the root unit, a root kept unsharded), written and built alike, and simulated without a
// protocol problem.
TEST(PlannerSpace, ChunkedLossCandidatesAreRunnablePrograms) {
  for (const std::string units : {"blocks", "embed_blocks_head"}) {
    json base = base_json("tiny-llama", 1, 4);
    base["model"] = {{"name", "tiny-llama"},
                     {"implementation", {{"preset", "torchtitan"}, {"loss_chunks", 64}}}};
    base["training"]["seq_len"] =
        24;  // the base: 8 x 24 tokens, 64 chunks; a candidate of 1 or 3 x 24: fewer
    base["training"]["batch_per_rank"] = 8;
    base["fsdp"] = {{"units", units}};
    const Scenario base_s = parse_scenario(base);
    SpaceOptions o;
    o.gpus = 4;
    o.gpus_per_node = 4;
    o.n_layers = base_s.model.n_layers;
    o.micro_batches = {1, 3};
    int checked = 0;
    for (const auto& c : enumerate_candidates(o)) {
      if (c.cpu_offload || c.expandable_segments) continue;
      SCOPED_TRACE(candidate_text(c) + " units " + units);
      const Scenario built = candidate_scenario(base_s, c);
      EXPECT_EQ(built.training.batch_per_rank * 24 % built.model.implementation.loss_chunks, 0);
      const Scenario parsed =
          parse_scenario(json::parse(candidate_scenario_json(base, c, "x", "").dump()));
      EXPECT_EQ(parsed.model.implementation.loss_chunks, built.model.implementation.loss_chunks);
      EXPECT_EQ(parsed.fsdp.reshard_for("root").kind, built.fsdp.reshard_for("root").kind);
      if (checked++ % 7 == 0) {
        const auto r = sim::simulate_scenario(built, {});
        EXPECT_TRUE(r.problems.empty());
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(PlannerSpace, WrittenCandidateSimulatesLikeTheBuiltOne) {
  const json base = base_json("tiny-llama", 1, 4);
  const Scenario base_s = parse_scenario(base);
  Candidate c;
  c.replicate = 2;
  c.shard = 2;
  c.reshard.kind = Kind::kFalse;
  c.precision = Precision::kBf16Fp32Reduce;
  c.ac.mode = RecomputeMode::kSelectiveLayer;
  c.ac.every = 2;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.expandable_segments = true;
  sim::SimulateOptions so;
  so.checks = false;
  const auto a = sim::simulate_scenario(candidate_scenario(base_s, c), so);
  const auto b =
      sim::simulate_scenario(parse_scenario(candidate_scenario_json(base, c, "x", "")), so);
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (size_t i = 0; i < a.classes.size(); ++i) {
    EXPECT_EQ(a.classes[i].peak_reserved_bytes, b.classes[i].peak_reserved_bytes);
    EXPECT_EQ(a.classes[i].peak_allocated_bytes, b.classes[i].peak_allocated_bytes);
  }
  EXPECT_EQ(a.step_time_s, b.step_time_s);
}

TEST(PlannerSpace, AbsolutizePathsMakesRelativePathsAbsolute) {
  json j = {{"model", {{"hf_config", "models/config.json"}}},
            {"hardware", {{"profile", "../hw/x.json"}}}};
  json a = absolutize_paths(j, "/data/scen");
  EXPECT_EQ(a["model"]["hf_config"], "/data/scen/models/config.json");
  EXPECT_EQ(a["hardware"]["profile"], "/data/hw/x.json");
  json named = {{"hardware", {{"profile", "h100"}}}};
  EXPECT_EQ(absolutize_paths(named, "/x")["hardware"]["profile"], "h100");
}

RC_GTEST_PROP(PlannerSpaceProps, CandidatesAreValidScenarios, ()) {
  const int gpn = *rc::gen::element(1, 2, 4);
  const int nodes = *rc::gen::inRange(1, 4);
  const int world = gpn * nodes;
  const json base = base_json("tiny-gpt2", nodes, gpn);
  const Scenario base_s = parse_scenario(base);
  SpaceOptions o;
  o.gpus = world;
  o.gpus_per_node = gpn;
  o.n_layers = base_s.model.n_layers;
  o.global_batch = world * *rc::gen::inRange(1, 5);
  const auto cs = enumerate_candidates(o);
  RC_ASSERT(!cs.empty());
  // A sample (parsing loads the hardware profile): every one is a valid scenario.
  for (size_t i = 0; i < cs.size(); i += 1 + cs.size() / 20) {
    const Scenario s = parse_scenario(candidate_scenario_json(base, cs[i], "c", ""));
    RC_ASSERT(s.world_size() == world);
    RC_ASSERT(s.training.batch_per_rank * s.training.grad_accum_steps * world == *o.global_batch);
  }
}

}  // namespace
}  // namespace fullshard::planner

namespace fullshard::planner {

// Tensor parallelism: degrees within a node that split the model, and meshes with a tp dim.
TEST(PlannerSpace, TensorParallelDegreesSplitTheModelWithinANode) {
  const ModelConfig l70 = *find_model("llama3.1-70b");
  EXPECT_EQ(tp_degrees(l70, 8192, 256, 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(tp_degrees(l70, 8192, 256, 4), (std::vector<int>{1, 2, 4}));  // never across nodes
  EXPECT_EQ(tp_degrees(l70, 8190, 256, 8), (std::vector<int>{1, 2}));  // seq_len splits 2 ways only
  const ModelConfig tiny = *find_model("tiny-llama");                  // 2 kv heads
  EXPECT_EQ(tp_degrees(tiny, 64, 8, 8), (std::vector<int>{1, 2}));
  EXPECT_EQ(tp_degrees(*find_model("gpt2-124m"), 1024, 8, 8), (std::vector<int>{1}));
  // The loss rules of check_tensor_parallel: a scenario whose loss tp cannot run plans tp 1
  // only (planning a torchtitan-2024-04 scenario used to abort on the first tp candidate).
  ModelConfig out32 = l70;
  out32.implementation.loss = LossImpl::kFp32Output;
  EXPECT_EQ(tp_degrees(out32, 8192, 256, 8), (std::vector<int>{1}));
  ModelConfig bf16 = l70;
  bf16.implementation.loss = LossImpl::kBf16Logits;
  EXPECT_EQ(tp_degrees(bf16, 8192, 256, 8, /*loss_parallel=*/true), (std::vector<int>{1}));
  EXPECT_EQ(tp_degrees(bf16, 8192, 256, 8, /*loss_parallel=*/false),
            (std::vector<int>{1, 2, 4, 8}));
}

// plan.json's shard_within_node against the mesh itself: every shard-dim group DeviceMesh
// builds for [replicate, shard, tp] lies on one node (rank / gpus_per_node) exactly when the
// planner says so. It used to ignore tp: [4, 8, 8] on 8-GPU nodes said true for shard groups
// spread over 8 nodes.
RC_GTEST_PROP(PlannerSpaceProps, ShardWithinNodeMatchesTheMeshGroups, ()) {
  Candidate c;
  c.replicate = *rc::gen::inRange(1, 5);
  c.shard = *rc::gen::inRange(1, 17);
  c.tp = *rc::gen::element(1, 2, 4, 8);
  const int world = c.replicate * c.shard * c.tp;
  const int gpus_per_node = *rc::gen::element(1, 2, 4, 8, 16);
  RC_PRE(world % gpus_per_node == 0);
  const DeviceMesh mesh({c.replicate, c.shard, c.tp}, {"dp_replicate", "dp_shard", "tp"});
  bool within = true;
  for (int r = 0; r < world; ++r)
    for (int member : mesh.group(r, 1).ranks)
      within = within && member / gpus_per_node == r / gpus_per_node;
  RC_ASSERT(shard_group_within_node(c, gpus_per_node) == within);
}

TEST(PlannerSpace, ShardWithinNodeCountsTheTensorParallelDim) {
  Candidate c;
  c.replicate = 4;
  c.shard = 8;
  c.tp = 8;
  EXPECT_FALSE(shard_group_within_node(c, 8));  // 8 shard ranks 8 apart: 8 nodes
  c.tp = 1;
  EXPECT_TRUE(shard_group_within_node(c, 8));
  c.shard = 2;
  c.tp = 4;
  EXPECT_TRUE(shard_group_within_node(c, 8));
}

TEST(PlannerSpace, TensorParallelCandidatesUseTheRemainingRanksForDataParallelism) {
  SpaceOptions o;
  o.gpus = 8;
  o.gpus_per_node = 8;
  o.n_layers = 2;
  o.global_batch = 8;
  o.tp_degrees = {1, 4};
  const auto cands = enumerate_candidates(o);
  int with_tp = 0;
  for (const Candidate& c : cands) {
    EXPECT_EQ(c.replicate * c.shard * c.tp, 8);
    if (c.tp == 4) {
      ++with_tp;
      // dp = 2 ranks share the global batch of 8: 4 sequences per tp group per step.
      EXPECT_EQ(c.micro_batch * c.grad_accum, 4);
    } else {
      EXPECT_EQ(c.micro_batch * c.grad_accum, 1);
    }
  }
  EXPECT_GT(with_tp, 0);
  Scenario base = parse_scenario(
      nlohmann::json{{"model", "tiny-llama"},
                     {"training", {{"seq_len", 8}}},
                     {"hardware", {{"profile", "h100-sxm-80gb"}, {"gpus_per_node", 8}}}});
  Candidate c;
  c.replicate = 1;
  c.shard = 4;
  c.tp = 2;
  const Scenario s = candidate_scenario(base, c);
  EXPECT_EQ(s.fsdp.mesh_shape, (std::vector<int>{4, 2}));
  EXPECT_EQ(s.fsdp.mesh_dim_names, (std::vector<std::string>{"shard", "tp"}));
  EXPECT_EQ(mesh_text(c), "FSDP 4 TP 2");
  c.replicate = 2;
  c.shard = 2;
  EXPECT_EQ(candidate_scenario(base, c).fsdp.mesh_shape, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(mesh_text(c), "HSDP 2x2 TP 2");
}

}  // namespace fullshard::planner
