// GPT-2's tensor-parallel plan (NOTE [GPT-2 tensor-parallel plan] in core/model/
// tensor_parallel.cc) composed with FSDP and HSDP, run for real on the CPU backend: 2-D and
// 3-D sharded training equals single-rank training, the simulator's memory prediction equals
// the measured one to the byte, and the fused c_attn's shards are the right rows of q, k, v.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>

#include "core/data/param_init.h"
#include "core/model/tensor_parallel.h"
#include "tests/support/cpu_support.h"
#include "tests/support/prop_support.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

// A random GPT-2 that splits `tp` ways: heads and the MLP's hidden units divisible.
json gpt2_model(int tp) {
  const int heads = tp * *rc::gen::element(1, 2);
  const int head_dim = *rc::gen::element(2, 4);
  return {{"arch", "gpt2"},
          {"name", "random"},
          {"vocab_size", 256},
          {"dim", heads * head_dim},
          {"n_layers", *rc::gen::inRange(1, 3)},
          {"n_heads", heads},
          {"ffn_dim", tp * *rc::gen::inRange(1, 5)},
          {"max_seq_len", 16}};
}

}  // namespace

// NOTE [fp32 tolerance] in cpu_training_prop_test.cc: the plan changes summation order only
// (rowwise partial sums reduce-scattered, bias / tp added to each, replicated gradients
// all-reduced), so the bound of the Llama tp property holds.
RC_GTEST_PROP(Gpt2TensorParallel, EqualsUnsharded, ()) {
  int world = 0, tp = 0;
  const json j = draw_tp_scenario(TpProperty::kEqualsUnsharded, gpt2_model, &world, &tp);
  sharded_equals_unsharded(j, unsharded_job(j, world / tp));
}

RC_GTEST_PROP(Gpt2TensorParallel, PredictedPeakMemoryEqualsMeasured, ()) {
  int world = 0, tp = 0;
  predicted_peaks_equal_measured(
      parse_scenario(draw_tp_scenario(TpProperty::kPeakMemory, gpt2_model, &world, &tp)));
}

// The plan: which parameters are split along which dim, and their local shapes.
TEST(Gpt2TensorParallel, PlanPlacesParametersAsMegatron) {
  ModelConfig c = *find_model("tiny-gpt2");
  TensorParallel tp;
  tp.degree = 2;
  tp.index = 1;
  Transformer m(c, tp);
  std::map<std::string, const Param*> by;
  m.root().for_each_param([&](Param& p) { by[p.fqn] = &p; });
  const int64_t D = c.dim, F = c.ffn_dim, V = c.vocab_size;
  auto expect = [&](const std::string& fqn, TpPlacement pl, Shape local, int blocks = 1,
                    bool grad_replicated = false) {
    ASSERT_TRUE(by.count(fqn)) << fqn;
    EXPECT_EQ(static_cast<int>(by[fqn]->tp_placement), static_cast<int>(pl)) << fqn;
    EXPECT_EQ(by[fqn]->shape, local) << fqn;
    EXPECT_EQ(by[fqn]->tp_blocks, blocks) << fqn;
    EXPECT_EQ(by[fqn]->tp_grad_replicated, grad_replicated) << fqn;
  };
  expect("wte.weight", TpPlacement::kShard0, {V / 2, D});
  expect("wpe.weight", TpPlacement::kReplicate, {c.max_seq_len, D});
  expect("layers.0.ln_1.weight", TpPlacement::kReplicate, {D});
  expect("layers.0.ln_1.bias", TpPlacement::kReplicate, {D});
  expect("layers.0.attn.c_attn.weight", TpPlacement::kShard0, {3 * D / 2, D}, 3);
  expect("layers.0.attn.c_attn.bias", TpPlacement::kShard0, {3 * D / 2}, 3);
  expect("layers.0.attn.c_proj.weight", TpPlacement::kShard1, {D, D / 2});
  expect("layers.0.attn.c_proj.bias", TpPlacement::kReplicate, {D}, 1, true);
  expect("layers.0.ln_2.weight", TpPlacement::kReplicate, {D});
  expect("layers.0.mlp.c_fc.weight", TpPlacement::kShard0, {F / 2, D});
  expect("layers.0.mlp.c_fc.bias", TpPlacement::kShard0, {F / 2});
  expect("layers.0.mlp.c_proj.weight", TpPlacement::kShard1, {D, F / 2});
  expect("layers.0.mlp.c_proj.bias", TpPlacement::kReplicate, {D}, 1, true);
  expect("ln_f.weight", TpPlacement::kReplicate, {D});
  EXPECT_EQ(by["layers.0.attn.c_attn.weight"]->global_shape(), (Shape{3 * D, D}));
}

// NOTE [Fused qkv under tensor parallelism] (core/model/tensor_parallel.cc): tp rank t's local
// c_attn rows are rows [t*D/tp, (t+1)*D/tp) of each of q, k and v, and FSDP's shard of those local
// rows (any offset) draws the same values as the unsharded tensor's rows.
RC_GTEST_PROP(Gpt2TensorParallel, FusedQkvShardsInitAsTheirGlobalRows, ()) {
  const int tp = *rc::gen::element(1, 2, 4);
  const int64_t block = *rc::gen::inRange(1, 4);  // local rows per block (D / tp)
  const int64_t D = block * tp, cols = *rc::gen::inRange(1, 4);
  const int t = *rc::gen::inRange(0, tp);
  const int64_t local = 3 * block;
  const int64_t offset = *rc::gen::inRange<int64_t>(0, local);
  const int64_t rows = *rc::gen::inRange<int64_t>(0, local - offset + 1);
  OpCall op;
  op.kind = OpKind::kInitParam;
  op.name = "c_attn";
  op.outputs.push_back(TensorRef{});
  op.outputs[0].meta = TensorMeta{DType::kFloat32, {rows, cols}};
  op.iargs = {offset, rows, cols, static_cast<int64_t>(ParamInit::kNormal), 12345, block, t, tp};
  op.fargs = {0.02};
  const std::vector<float> v = init_param_values(op);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t l = offset + r, which = l / block;  // 0 q, 1 k, 2 v
    const int64_t global_row = which * D + t * block + l % block;
    for (int64_t c = 0; c < cols; ++c)
      RC_ASSERT(v[r * cols + c] == init_value(static_cast<int64_t>(ParamInit::kNormal), 0.02, 12345,
                                              global_row * cols + c));
  }
}

TEST(Gpt2TensorParallel, UnsplittableScenariosAreRefused) {
  TinyOptions o;
  o.seq = 8;
  o.model = "tiny-gpt2";
  json base = tiny_scenario_json(o);
  base["fsdp"]["mesh"] = {{"shape", {1, 2}}, {"dim_names", {"dp_shard", "tp"}}};
  base["hardware"]["gpus_per_node"] = 2;
  auto error_of = [](const json& j) { return input_error_of([&] { parse_scenario(j); }); };
  EXPECT_EQ(error_of(base), "");
  json heads = base;
  heads["model"] = {{"arch", "gpt2"}, {"name", "g"},  {"vocab_size", 256}, {"dim", 12},
                    {"n_layers", 1},  {"n_heads", 3}, {"ffn_dim", 12},     {"max_seq_len", 16}};
  EXPECT_NE(error_of(heads).find("model.n_heads"), std::string::npos) << error_of(heads);
  json ffn = heads;
  ffn["model"]["n_heads"] = 2;
  ffn["model"]["ffn_dim"] = 13;
  EXPECT_NE(error_of(ffn).find("model.ffn_dim"), std::string::npos) << error_of(ffn);
}

// Measured reports split communication by mesh dim (NOTE [Measured step breakdown]): on a
// real FSDP x tp run the tp collectives (on the compute stream) and FSDP's are both measured,
// HSDP's replicate dim is absent, and every rank's tp time is communication, not compute.
TEST(Gpt2TensorParallel, MeasuredCommunicationIsSplitByMeshDim) {
  TinyOptions o;
  o.model = "tiny-gpt2";
  o.seq = 8;
  json j = tiny_scenario_json(o);
  j["fsdp"]["mesh"] = {{"shape", {2, 2}}, {"dim_names", {"dp_shard", "tp"}}};
  j["hardware"]["gpus_per_node"] = 4;
  const RealRun real = run_real(parse_scenario(j));
  for (const auto& r : real.ranks) {
    const StepBreakdown& b = r.last_step;
    const auto dim = [&](MeshDimKind k) { return b.comm_by_dim_s[static_cast<size_t>(k)]; };
    EXPECT_GT(dim(MeshDimKind::kTp), 0);
    EXPECT_GT(dim(MeshDimKind::kShard), 0);
    EXPECT_EQ(dim(MeshDimKind::kReplicate), 0);
    EXPECT_LE(b.exposed_comm_by_dim_s[static_cast<size_t>(MeshDimKind::kTp)],
              dim(MeshDimKind::kTp) + 1e-12);
    // tp collectives left the compute stream's busy time for communication.
    EXPECT_LE(b.compute_s + dim(MeshDimKind::kTp),
              b.stream_busy_s[static_cast<size_t>(StreamRole::kDefault)] + 1e-9);
    EXPECT_GE(b.comm_s + 1e-12, dim(MeshDimKind::kTp));
  }
}
