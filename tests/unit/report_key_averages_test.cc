// NOTE [Per-op times] (core/report/key_averages.h): the per-op table's pure parts: the key (layer
// index folded out), the join of launches and kernel times, predictions beside measurements, the
// "differ most" rows, and the report format's "ops" array.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "core/common/error.h"
#include "core/report/key_averages.h"

using namespace fullshard;

TEST(OpKey, FoldsLayerIndicesOnly) {
  EXPECT_EQ(op_key("layers.3.attention.wq backward_weight"), "layers.attention.wq backward_weight");
  EXPECT_EQ(op_key("layers.31.attention backward"), "layers.attention backward");
  EXPECT_EQ(op_key("h.11.mlp.c_fc"), "h.mlp.c_fc");
  EXPECT_EQ(op_key("layers.0"), "layers");
  EXPECT_EQ(op_key("layers.2 checkpoint"), "layers checkpoint");
  EXPECT_EQ(op_key("shard/post_forward[2] copy_in"), "shard/post_forward copy_in");
  EXPECT_EQ(op_key("3.mlp"), "mlp");
  // Digits inside a name are not an index: w1, c_fc2, fp8, "x1.5".
  EXPECT_EQ(op_key("layers.1.feed_forward.w1"), "layers.feed_forward.w1");
  EXPECT_EQ(op_key("output"), "output");
  EXPECT_EQ(op_key("optimizer.step (fused AdamW)"), "optimizer.step (fused AdamW)");
  EXPECT_EQ(op_key("scale 1.5x"), "scale 1.5x");
  EXPECT_EQ(op_key("a[x]"), "a[x]");
  EXPECT_EQ(op_key(""), "");
}

// Any layer index, in any position of a module path, folds to the same key; a different module
// never does.
RC_GTEST_PROP(OpKey, TheSameOpOfEveryLayerHasOneKey, (unsigned i, unsigned j)) {
  const std::string role =
      *rc::gen::element<std::string>("attention backward", "attention.wq backward_weight",
                                     "feed_forward.w2", "attention_norm", "mlp.c_proj grad_input");
  const std::string prefix =
      *rc::gen::element<std::string>("layers", "h", "model.layers", "encoder.blocks");
  const std::string a = prefix + "." + std::to_string(i) + "." + role;
  const std::string b = prefix + "." + std::to_string(j) + "." + role;
  RC_ASSERT(op_key(a) == op_key(b));
  RC_ASSERT(op_key(a) == prefix + "." + role);
  RC_ASSERT(op_key(op_key(a)) == op_key(a));  // folding twice changes nothing
  RC_ASSERT(op_key(a) != op_key(prefix + "." + std::to_string(i) + "." + role + "2"));
}

TEST(KeyAverages, JoinsLaunchesAndKernelTimesBySeq) {
  const std::vector<LaunchedOp> ops{{10, OpKind::kLinear, "layers.0.attention.wq", 100, 40},
                                    {12, OpKind::kLinear, "layers.1.attention.wq", 100, 40},
                                    {15, OpKind::kFill, "loss grad seed", 0, 8},
                                    {20, OpKind::kLinear, "output", 500, 200}};
  // seq 15 was not timed; seq 99 is no launched op (a collective's, say).
  const std::vector<KernelTime> times{
      {10, 1.0, 1.5}, {12, 2.0, 2.5}, {20, 3.0, 3.25}, {99, 0.0, 9.0}};
  const auto t = key_averages(ops, times);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].key, "layers.attention.wq");  // most measured time first
  EXPECT_EQ(t[0].kind, op_kind_name(OpKind::kLinear));
  EXPECT_EQ(t[0].calls, 2);
  EXPECT_DOUBLE_EQ(t[0].measured_s, 1.0);
  EXPECT_DOUBLE_EQ(t[0].flops, 200);
  EXPECT_DOUBLE_EQ(t[0].flops_per_s(), 200);
  EXPECT_DOUBLE_EQ(t[0].bytes_per_s(), 80);
  EXPECT_EQ(t[1].key, "output");
  EXPECT_EQ(t[2].key, "loss grad seed");
  EXPECT_EQ(t[2].calls, 1);
  EXPECT_EQ(t[2].measured_s, 0.0);
  EXPECT_EQ(t[2].flops_per_s(), 0.0);  // never a division by zero
}

TEST(KeyAverages, PredictionsSitBesideMeasurementsAndTheLargestGapsComeFirst) {
  auto t = key_averages({{1, OpKind::kLinear, "a", 1, 1},
                         {2, OpKind::kLinear, "b", 1, 1},
                         {3, OpKind::kFill, "c", 0, 1}},
                        {{1, 0, 1.0}, {2, 0, 0.2}, {3, 0, 0.01}});
  attach_predictions(t, {{key_id("a", op_kind_name(OpKind::kLinear)), 0.9},
                         {key_id("b", op_kind_name(OpKind::kLinear)), 0.6},
                         {key_id("d", op_kind_name(OpKind::kFill)), 0.05}});
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0].predicted_s, 0.9);
  EXPECT_DOUBLE_EQ(t[1].predicted_s, 0.6);
  EXPECT_EQ(t[2].predicted_s, 0.0);  // launched, not predicted
  EXPECT_EQ(t[3].key, "d");          // predicted, not launched
  EXPECT_EQ(t[3].calls, 0);
  const auto d = differ_most(t, 2);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "b");  // |0.2 - 0.6|
  EXPECT_EQ(d[1].key, "a");  // |1.0 - 0.9|
}

TEST(KeyAverages, JsonRoundTripAndBadInput) {
  auto t = key_averages({{1, OpKind::kLinear, "layers.4.x", 6, 8}}, {{1, 0.5, 2.5}});
  const auto j = key_averages_json(t);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["key"], "layers.x");
  EXPECT_TRUE(j[0]["predicted_s"].is_null());
  EXPECT_DOUBLE_EQ(j[0]["flops_per_s"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j[0]["bytes_per_s"].get<double>(), 4.0);
  auto back = key_averages_from_json(j);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].key, "layers.x");
  EXPECT_EQ(back[0].calls, 1);
  EXPECT_DOUBLE_EQ(back[0].measured_s, 2.0);
  EXPECT_LT(back[0].predicted_s, 0);
  attach_predictions(t, {{key_id("layers.x", op_kind_name(OpKind::kLinear)), 1.5}});
  EXPECT_DOUBLE_EQ(key_averages_from_json(key_averages_json(t))[0].predicted_s, 1.5);
  auto bad = j;
  bad[0]["measured_s"] = -1;
  try {
    key_averages_from_json(bad);
    FAIL() << "a negative time was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "ops[0].measured_s");
  }
  EXPECT_THROW(key_averages_from_json(nlohmann::json::object()), InputError);
}
