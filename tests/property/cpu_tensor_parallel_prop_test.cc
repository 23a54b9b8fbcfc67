// Tensor parallelism composed with FSDP and HSDP, run for real on the CPU backend (ranks as
// threads over Gloo): 2-D and 3-D sharded training equals single-rank training, and the
// simulator's memory prediction equals what the real backend measured, to the byte.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <vector>

#include "core/model/tensor_parallel.h"
#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

// A random Llama that splits `tp` ways: heads, kv heads and the FFN's hidden units divisible.
json tp_model(int tp) {
  const int heads = tp * *rc::gen::element(1, 2);
  const int kv = *rc::gen::element(tp, heads);
  const int head_dim = *rc::gen::element(2, 4);
  return {{"arch", "llama"},          {"name", "random"},      {"vocab_size", 256},
          {"dim", heads * head_dim},  {"n_layers", *rc::gen::inRange(1, 3)},
          {"n_heads", heads},         {"n_kv_heads", kv},      {"ffn_dim", tp * *rc::gen::inRange(1, 5)},
          {"max_seq_len", 16},        {"tie_embeddings", *rc::gen::arbitrary<bool>()}};
}

// torchtitan's units under tp, maybe: fsdp.units "embed_blocks_head" (tied:
// fully_shard([tok_embeddings, norm, output]), NOTE [Tied embeddings unit]) and, with loss
// parallel, the chunked loss over the gathered norm output (NOTE [Chunked loss under tp]) with a
// chunk count dividing the rank's batch x seq tokens.
void maybe_torchtitan_units_and_chunked_loss(json& j) {
  if (*rc::gen::arbitrary<bool>()) {
    j["fsdp"]["units"] = "embed_blocks_head";
    RC_TAG(j["model"]["tie_embeddings"].get<bool>() ? "tied embed_blocks_head" : "embed_blocks_head");
  }
  if (!j["tensor_parallel"]["loss_parallel"].get<bool>() || !*rc::gen::arbitrary<bool>()) return;
  const int tokens = j["training"]["batch_per_rank"].get<int>() * j["training"]["seq_len"].get<int>();
  std::vector<int> divisors;
  for (int n = 1; n <= tokens; ++n)
    if (tokens % n == 0) divisors.push_back(n);
  j["model"]["implementation"] = {{"loss", "chunked"}, {"loss_chunks", *rc::gen::elementOf(divisors)}};
  keep_root_unsharded_for_chunks(j);
  RC_TAG("chunked loss");
}

}  // namespace

// NOTE [fp32 tolerance] in cpu_training_prop_test.cc: tensor parallelism changes summation
// order only (partial sums of rowwise products reduce-scattered, replicated norm gradients
// all-reduced), so the same bound holds.
RC_GTEST_PROP(TensorParallel, EqualsUnsharded, ()) {
  const int tp = *rc::gen::element(2, 4);
  int world = 0, shard = 0;
  TinyOptions o;
  json mesh = tp_mesh(tp, &world, &shard);
  std::vector<json> raf = {nullptr, true, false};
  for (int n = 2; n < shard; ++n)
    if (shard % n == 0) raf.push_back(n);
  o.reshard_after_forward = *rc::gen::elementOf(raf);
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.activation_checkpointing = *rc::gen::element(json("none"), json("full"), json("selective_op"));
  o.max_grad_norm = *rc::gen::element(0.0, 1.0);
  o.steps = 2;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = tp * *rc::gen::inRange(1, 4);
  json j = tiny_scenario_json(o);
  j["fsdp"]["mesh"] = mesh;
  j["hardware"]["gpus_per_node"] = world;
  j["model"] = tp_model(tp);
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}, {"max_grad_norm", o.max_grad_norm}};
  j["training"]["seed"] = *rc::gen::inRange(0, 1000);
  const bool loss_parallel = *rc::gen::arbitrary<bool>();
  j["tensor_parallel"] = {{"loss_parallel", loss_parallel}};
  maybe_torchtitan_units_and_chunked_loss(j);
  RC_TAG("tp " + std::to_string(tp));
  RC_TAG(loss_parallel ? "loss parallel" : "logits gathered");
  RC_TAG(mesh["shape"].size() == 3 ? "3-D" : "2-D");
  RealRun sharded = run_real(parse_scenario(j));
  RealRun ref = run_real(parse_scenario(unsharded_job(j, world / tp)));
  std::string where;
  const double v = max_violation(sharded, ref, 1e-5, 1e-3, &where);
  if (!(v <= 1.0)) RC_FAIL("worst parameter difference at " + where);
  for (size_t k = 0; k < ref.mean_loss.size(); ++k) RC_ASSERT(std::abs(sharded.mean_loss[k] - ref.mean_loss[k]) <= 1e-4);
}

// The simulator and the real backend run the same host program, tp collectives included.
RC_GTEST_PROP(TensorParallel, PredictedPeakMemoryEqualsMeasured, ()) {
  const int tp = *rc::gen::element(2, 4);
  int world = 0, shard = 0;
  TinyOptions o;
  json mesh = tp_mesh(tp, &world, &shard);
  o.mixed_precision = *rc::gen::element(json::object(), json{{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}},
                                        json{{"param_dtype", "bf16"}});
  o.reshard_after_forward = *rc::gen::element(json(nullptr), json(true), json(false));
  o.cpu_offload = *rc::gen::arbitrary<bool>();
  o.activation_checkpointing = *rc::gen::element(json("none"), json("full"), json("selective_op"));
  o.grad_accum_steps = *rc::gen::inRange(1, 3);
  o.steps = 2;
  o.batch = *rc::gen::inRange(1, 3);
  o.seq = tp * *rc::gen::inRange(1, 4);
  const bool expandable = *rc::gen::arbitrary<bool>();
  o.hardware_extra = {{"allocator", {{"expandable_segments", expandable}}}};
  json j = tiny_scenario_json(o);
  j["fsdp"]["mesh"] = mesh;
  j["hardware"]["gpus_per_node"] = world;
  j["model"] = tp_model(tp);
  j["tensor_parallel"] = {{"loss_parallel", *rc::gen::arbitrary<bool>()}};
  if (!j["tensor_parallel"]["loss_parallel"].get<bool>())
    j["model"]["implementation"] = {{"loss", *rc::gen::element(std::string("fp32_logits"), std::string("bf16_logits"))},
                                    {"keep_logits", *rc::gen::arbitrary<bool>()}};
  maybe_torchtitan_units_and_chunked_loss(j);
  Scenario s = parse_scenario(j);
  predicted_peaks_equal_measured(s);
}

// NOTE [bf16 tolerance with tp]: on top of NOTE [bf16 tolerance] in cpu_training_prop_test.cc,
// the tp reduce-scatters of activation gradients sum bf16 partial sums (as NCCL does in bf16),
// so a gradient element near zero may change sign; Adam then moves it by up to lr the other
// way each step. The absolute bound is that worst case, 2 * lr * steps = 4e-3.
TEST(TensorParallel, MixedPrecisionMatchesUnshardedBf16) {
  TinyOptions o;
  o.steps = 2;
  o.seq = 8;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = tiny_scenario_json(o);
  j["fsdp"]["mesh"] = {{"shape", {2, 2}}, {"dim_names", {"dp_shard", "tp"}}};
  j["hardware"]["gpus_per_node"] = 4;
  j["training"]["optimizer"] = {{"lr", 1e-3}, {"eps", 1e-6}};
  RealRun sharded = run_real(parse_scenario(j));
  RealRun ref = run_real(parse_scenario(unsharded_job(j, 2)));
  std::string where;
  EXPECT_LE(max_violation(sharded, ref, 4e-3, 2e-2, &where), 1.0) << where;
  for (size_t k = 0; k < ref.mean_loss.size(); ++k) EXPECT_NEAR(sharded.mean_loss[k], ref.mean_loss[k], 2e-2);
}

// torchtitan's plan: which parameters are split along which dim, and their local shapes.
TEST(TensorParallel, PlanPlacesParametersAsTorchtitan) {
  ModelConfig c = *find_model("tiny-llama");
  TensorParallel tp;
  tp.degree = 2;
  tp.index = 1;
  Transformer m(c, tp);
  std::map<std::string, const Param*> by;
  m.root().for_each_param([&](Param& p) { by[p.fqn] = &p; });
  const int64_t D = c.dim, F = c.ffn_dim, kv = c.n_kv_heads * c.head_dim(), V = c.vocab_size;
  auto expect = [&](const std::string& fqn, TpPlacement pl, Shape local) {
    ASSERT_TRUE(by.count(fqn)) << fqn;
    EXPECT_EQ(static_cast<int>(by[fqn]->tp_placement), static_cast<int>(pl)) << fqn;
    EXPECT_EQ(by[fqn]->shape, local) << fqn;
    EXPECT_EQ(by[fqn]->tp_index, 1) << fqn;
  };
  expect("tok_embeddings.weight", TpPlacement::kShard0, {V / 2, D});
  expect("layers.0.attention_norm.weight", TpPlacement::kReplicate, {D});
  expect("layers.0.attention.wq.weight", TpPlacement::kShard0, {D / 2, D});
  expect("layers.0.attention.wk.weight", TpPlacement::kShard0, {kv / 2, D});
  expect("layers.0.attention.wv.weight", TpPlacement::kShard0, {kv / 2, D});
  expect("layers.0.attention.wo.weight", TpPlacement::kShard1, {D, D / 2});
  expect("layers.0.ffn_norm.weight", TpPlacement::kReplicate, {D});
  expect("layers.0.feed_forward.w1.weight", TpPlacement::kShard0, {F / 2, D});
  expect("layers.0.feed_forward.w3.weight", TpPlacement::kShard0, {F / 2, D});
  expect("layers.0.feed_forward.w2.weight", TpPlacement::kShard1, {D, F / 2});
  expect("norm.weight", TpPlacement::kReplicate, {D});
  if (!c.tie_embeddings) expect("output.weight", TpPlacement::kShard0, {V / 2, D});
  EXPECT_EQ(by["layers.0.attention.wo.weight"]->global_shape(), (Shape{D, D}));
}

// Every mesh / model combination that cannot split is refused in one line naming the field.
TEST(TensorParallel, UnsplittableScenariosAreRefused) {
  TinyOptions o;
  o.seq = 8;
  json base = tiny_scenario_json(o);
  base["fsdp"]["mesh"] = {{"shape", {1, 4}}, {"dim_names", {"dp_shard", "tp"}}};
  base["hardware"]["gpus_per_node"] = 4;
  auto error_of = [](const json& j) { return input_error_of([&] { parse_scenario(j); }); };
  // tiny-llama has 2 kv heads: tp 4 cannot split them.
  EXPECT_NE(error_of(base).find("model.n_kv_heads"), std::string::npos) << error_of(base);
  json seq = base;
  seq["fsdp"]["mesh"]["shape"] = {2, 2};
  seq["training"]["seq_len"] = 7;
  EXPECT_NE(error_of(seq).find("training.seq_len"), std::string::npos) << error_of(seq);
  json gpt2 = seq;
  gpt2["training"]["seq_len"] = 8;
  gpt2["model"] = "tiny-gpt2";
  EXPECT_EQ(error_of(gpt2), "");  // GPT-2's plan: cpu_gpt2_tensor_parallel_prop_test.cc
  json unnamed = seq;
  unnamed["training"]["seq_len"] = 8;
  unnamed["fsdp"]["mesh"] = {{"shape", {1, 2, 2}}};
  EXPECT_NE(error_of(unnamed).find("dim_names"), std::string::npos) << error_of(unnamed);
  json order = unnamed;
  order["fsdp"]["mesh"]["dim_names"] = {"tp", "dp_shard", "dp_replicate"};
  EXPECT_NE(error_of(order).find("fsdp.mesh.dim_names"), std::string::npos) << error_of(order);
  json lp = seq;
  lp["training"]["seq_len"] = 8;
  lp["tensor_parallel"] = {{"async", true}};
  EXPECT_NE(error_of(lp).find("tensor_parallel.async"), std::string::npos) << error_of(lp);
  json bf16_loss = seq;
  bf16_loss["training"]["seq_len"] = 8;
  bf16_loss["model"] = {{"name", "tiny-llama"}, {"implementation", {{"loss", "bf16_logits"}}}};
  EXPECT_NE(error_of(bf16_loss).find("model.implementation.loss"), std::string::npos) << error_of(bf16_loss);
  bf16_loss["tensor_parallel"] = {{"loss_parallel", false}};
  EXPECT_EQ(error_of(bf16_loss), "");
  json uneven = seq;
  uneven["training"]["seq_len"] = 8;
  uneven["training"]["rank_batch"] = {{{"rank", 1}, {"batch", 3}}};
  EXPECT_NE(error_of(uneven).find("training.rank_batch"), std::string::npos) << error_of(uneven);
  json ok = seq;
  ok["training"]["seq_len"] = 8;
  EXPECT_EQ(error_of(ok), "");
}

// DeviceMesh's flattened sub-mesh over several dims (the shard+tp group of the norm).
TEST(TensorParallel, FlattenedSubMeshGroups) {
  DeviceMesh mesh({2, 3, 2}, {"replicate", "shard", "tp"});
  // rank 7 = coordinates (1, 0, 1)
  ProcessGroup g = mesh.group(7, {1, 2}, "shard+tp");
  EXPECT_EQ(g.ranks, (std::vector<int>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(mesh.group(7, 2).ranks, (std::vector<int>{6, 7}));
  EXPECT_EQ(mesh.group(7, {0, 2}, "r+t").ranks, (std::vector<int>{0, 1, 6, 7}));
}
