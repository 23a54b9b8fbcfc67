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
  return {{"arch", "llama"},
          {"name", "random"},
          {"vocab_size", 256},
          {"dim", heads * head_dim},
          {"n_layers", *rc::gen::inRange(1, 3)},
          {"n_heads", heads},
          {"n_kv_heads", kv},
          {"ffn_dim", tp * *rc::gen::inRange(1, 5)},
          {"max_seq_len", 16},
          {"tie_embeddings", *rc::gen::arbitrary<bool>()}};
}

// torchtitan's units under tp, maybe: fsdp.units "embed_blocks_head" (tied:
// fully_shard([tok_embeddings, norm, output]), NOTE [Tied embeddings unit]) and, with loss
// parallel, the chunked loss over the gathered norm output (NOTE [Chunked loss under tp]) with a
// chunk count dividing the rank's batch x seq tokens.
void maybe_torchtitan_units_and_chunked_loss(json& j) {
  if (*rc::gen::arbitrary<bool>()) {
    j["fsdp"]["units"] = "embed_blocks_head";
    RC_TAG(j["model"]["tie_embeddings"].get<bool>() ? "tied embed_blocks_head"
                                                    : "embed_blocks_head");
  }
  if (!j["tensor_parallel"]["loss_parallel"].get<bool>() || !*rc::gen::arbitrary<bool>()) return;
  j["model"]["implementation"] = {{"loss", "chunked"}, {"loss_chunks", draw_loss_chunks(j)}};
  keep_root_unsharded_for_chunks(j);
  RC_TAG("chunked loss");
}

}  // namespace

// NOTE [fp32 tolerance] in cpu_training_prop_test.cc: tensor parallelism changes summation
// order only (partial sums of rowwise products reduce-scattered, replicated norm gradients
// all-reduced), so the same bound holds.
RC_GTEST_PROP(TensorParallel, EqualsUnsharded, ()) {
  int world = 0, tp = 0;
  json j = draw_tp_scenario(TpProperty::kEqualsUnsharded, tp_model, &world, &tp);
  maybe_torchtitan_units_and_chunked_loss(j);
  sharded_equals_unsharded(j, unsharded_job(j, world / tp));
}

// The simulator and the real backend run the same host program, tp collectives included.
RC_GTEST_PROP(TensorParallel, PredictedPeakMemoryEqualsMeasured, ()) {
  int world = 0, tp = 0;
  json j = draw_tp_scenario(TpProperty::kPeakMemory, tp_model, &world, &tp);
  if (!j["tensor_parallel"]["loss_parallel"].get<bool>())
    j["model"]["implementation"] = {
        {"loss", *rc::gen::element(std::string("fp32_logits"), std::string("bf16_logits"))},
        {"keep_logits", *rc::gen::arbitrary<bool>()}};
  maybe_torchtitan_units_and_chunked_loss(j);
  predicted_peaks_equal_measured(parse_scenario(j));
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
  for (size_t k = 0; k < ref.mean_loss.size(); ++k)
    EXPECT_NEAR(sharded.mean_loss[k], ref.mean_loss[k], 2e-2);
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
  EXPECT_NE(error_of(bf16_loss).find("model.implementation.loss"), std::string::npos)
      << error_of(bf16_loss);
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
