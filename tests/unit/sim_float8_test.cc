// Float8 training (training.float8, docs/float8.md): torchao's Float8Linear op by op per recipe,
// FSDP2's float8 all-gather and precomputed scales, which linears convert, and what the scenario
// refuses.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <string>

#include "core/model/float8_config.h"
#include "core/runtime/float8_args.h"
#include "core/runtime/op_table.h"
#include "simulator/engine/program.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using nlohmann::json;

namespace {

// tiny-llama (dim 64, kv 32, ffn 128, vocab 256: every dim a multiple of 16) on 2 H100s,
// batch 2 x seq 32: M = 64 rows per linear.
json f8_json(const json& float8, bool compile = false, const std::string& profile = "h100") {
  fullshard::testing::TinyOptions o;
  o.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = fullshard::testing::tiny_scenario_json(o);
  j["hardware"]["profile"] = profile;
  if (compile) j["model"] = {{"name", "tiny-llama"}, {"implementation", {{"compile", true}}}};
  if (!float8.is_null()) j["training"]["float8"] = float8;
  return j;
}

struct StepOps {
  std::map<OpKind, int> count;                     // kernels of the last step, by kind
  std::map<std::string, const sim::Instr*> named;  // by name (last one wins)
  std::vector<sim::Instr> kernels;
  std::vector<sim::Instr> collectives;
  sim::SimulationReport report;
};

StepOps last_step(const json& j) {
  StepOps s;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs) {
      if (in.step != last) continue;
      if (in.type == sim::InstrType::kKernel) {
        ++s.count[in.op];
        s.kernels.push_back(in);
      } else if (in.type == sim::InstrType::kCollective) {
        s.collectives.push_back(in);
      }
    }
  };
  s.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(s.report.ok()) << fullshard::testing::problems_text(s.report);
  return s;
}

constexpr int kLinears = 2 * 7;  // 2 blocks x (wq, wk, wv, wo, w1, w2, w3); output filtered
constexpr int64_t M = 2 * 32;

// The {M, K, N} of every converted linear of tiny-llama in forward order (wq, wk, wv, wo, w1,
// w3, w2), each block.
std::vector<std::array<int64_t, 3>> linear_shapes() {
  std::vector<std::array<int64_t, 3>> v;
  for (int b = 0; b < 2; ++b)
    for (auto kn : std::vector<std::pair<int64_t, int64_t>>{
             {64, 64}, {64, 32}, {64, 32}, {64, 64}, {64, 128}, {64, 128}, {128, 64}})
      v.push_back({M, kn.first, kn.second});
  return v;
}

}  // namespace

TEST(Float8Config, TorchtitanFilterAndTorchaoAutoFilter) {
  Float8Training f;
  f.recipe = Float8Recipe::kTensorwise;
  f.filter_fqns = {"output"};
  EXPECT_TRUE(float8_converts(f, "layers.0.attention.wq", 4096, 4096));
  EXPECT_FALSE(float8_converts(f, "output", 128256, 4096));        // filtered by fqn
  EXPECT_FALSE(float8_converts(f, "layers.0.moe.gate", 8, 4096));  // 8 rows: not a multiple of 16
  EXPECT_FALSE(float8_converts(f, "x", 4096, 4104));
  f.auto_filter_small_kn = true;  // _auto_filter_for_tensorwise: K <= 4096 and N <= 1024 skip
  EXPECT_FALSE(float8_converts(f, "layers.0.attention.wk", 1024, 4096));
  EXPECT_TRUE(float8_converts(f, "layers.0.attention.wq", 4096, 4096));
  EXPECT_TRUE(float8_converts(f, "layers.0.feed_forward.w2", 1024, 14336));
  f.recipe = Float8Recipe::kRowwise;  // N <= 2048, K <= 1024, or N <= 4096 and K <= 2048 skip
  EXPECT_FALSE(float8_converts(f, "a", 2048, 8192));
  EXPECT_FALSE(float8_converts(f, "a", 8192, 1024));
  EXPECT_FALSE(float8_converts(f, "a", 4096, 2048));
  EXPECT_TRUE(float8_converts(f, "a", 4096, 4096));
  f.recipe = Float8Recipe::kNone;
  EXPECT_FALSE(float8_converts(f, "a", 4096, 4096));
  for (const std::string& n : float8_recipe_names())
    EXPECT_EQ(float8_recipe_name(*float8_recipe_from_name(n)), n);
}

// Per recipe, eager: what each float8 linear launches in one step (full forward + backward,
// no recomputation), the scaled matmuls' FLOPs and bytes, and the dtypes they run in.
TEST(Float8Linear, EagerOpsPerRecipe) {
  struct Want {
    const char* recipe;
    int casts;          // casts per linear per step: forward 2 + backward
    int scale_kernels;  // small kernels per cast's scale
    bool grad_weight_hp;
  };
  for (const Want& w : {Want{"tensorwise", 6, 5, false}, Want{"rowwise", 6, 8, false},
                        Want{"rowwise_with_gw_hp", 4, 8, true}}) {
    SCOPED_TRACE(w.recipe);
    StepOps s = last_step(f8_json({{"recipe", w.recipe}, {"filter_fqns", {"output"}}}));
    EXPECT_EQ(s.count[OpKind::kScaledMM], kLinears);
    EXPECT_EQ(s.count[OpKind::kScaledMMBackwardInput], kLinears);
    EXPECT_EQ(s.count[OpKind::kScaledMMBackwardWeight], w.grad_weight_hp ? 0 : kLinears);
    // The bf16 linears left: the output projection (filtered), and grad_weight in high
    // precision for rowwise_with_gw_hp.
    EXPECT_EQ(s.count[OpKind::kLinear], 1);
    EXPECT_EQ(s.count[OpKind::kLinearBackwardWeight], 1 + (w.grad_weight_hp ? kLinears : 0));
    // Each cast: abs, amax, its scale kernels, .to(fp32) (the operands are bf16), * scale,
    // clamp, .to(float8). rowwise_with_gw_hp's tensorwise weight cast has its power-of-two
    // rounding too (round_scales_to_power_of_2 is per config).
    const int casts = w.casts * kLinears;
    EXPECT_EQ(s.count[OpKind::kFloat8Abs], casts);
    EXPECT_EQ(s.count[OpKind::kFloat8Amax], casts);
    EXPECT_EQ(s.count[OpKind::kFloat8Scale], casts * w.scale_kernels);
    EXPECT_EQ(s.count[OpKind::kFloat8Cast], casts * 4);
    // The scaled matmuls: 2 M K N FLOPs, float8 operands (the cost model's float8 rate), bytes =
    // the float8 operands, their fp32 scales and the bf16 output.
    std::vector<std::array<int64_t, 3>> shapes = linear_shapes();
    size_t i = 0;
    for (const auto& k : s.kernels) {
      if (k.op != OpKind::kScaledMM) continue;
      ASSERT_LT(i, shapes.size());
      const auto [m, kk, n] = shapes[i++];
      EXPECT_EQ(k.flops, 2.0 * m * kk * n);
      EXPECT_TRUE(is_float8(k.dtype));
      const bool rows = std::string(w.recipe) != "tensorwise";
      const double scales = 4.0 * (rows ? m + n : 2);
      EXPECT_EQ(k.bytes, static_cast<double>(m * kk + n * kk + 2 * m * n) + scales);
      EXPECT_EQ(k.dims, (std::array<int64_t, 3>{m, kk, n}));
    }
    EXPECT_EQ(i, shapes.size());
  }
}

// Compiled (torch.compile of each block): each cast is one amax kernel and one cast kernel;
// tensorwise reuses grad_output's cast for grad_weight.
TEST(Float8Linear, CompiledCastsFuse) {
  for (auto [recipe, casts] : std::vector<std::pair<const char*, int>>{
           {"tensorwise", 5}, {"rowwise", 6}, {"rowwise_with_gw_hp", 4}}) {
    SCOPED_TRACE(recipe);
    StepOps s = last_step(f8_json({{"recipe", recipe}, {"filter_fqns", {"output"}}}, true));
    EXPECT_EQ(s.count[OpKind::kFloat8Abs], 0);
    EXPECT_EQ(s.count[OpKind::kFloat8Scale], 0);
    EXPECT_EQ(s.count[OpKind::kFloat8Amax], casts * kLinears);
    EXPECT_EQ(s.count[OpKind::kFloat8Cast], casts * kLinears);
  }
}

// The float8 casts are transient (torchao saves the high-precision input and the weight, as
// nn.Linear does): after each step exactly the bf16 run's bytes are allocated, for every recipe.
TEST(Float8Linear, NothingOutlivesTheStep) {
  auto bf16 = sim::simulate_scenario(parse_scenario(f8_json(nullptr)));
  for (const char* recipe : {"tensorwise", "rowwise", "rowwise_with_gw_hp"}) {
    auto f8 = sim::simulate_scenario(
        parse_scenario(f8_json({{"recipe", recipe}, {"filter_fqns", {"output"}}})));
    ASSERT_TRUE(f8.ok());
    EXPECT_EQ(f8.classes[0].allocated_after_step, bf16.classes[0].allocated_after_step) << recipe;
    EXPECT_GT(f8.classes[0].peak_allocated_bytes, 0u);
  }
}

// FSDP2's float8 all-gather: each block's all-gather carries its linears' weights in float8 (1
// byte) and its norms in bf16 (2 bytes), as bytes; exactly half of the bf16 all-gather for the
// linears' part.
TEST(Float8AllGather, HalvesTheLinearWeightsBytes) {
  StepOps bf = last_step(f8_json({{"recipe", "tensorwise"}, {"filter_fqns", {"output"}}}));
  StepOps ag = last_step(f8_json({{"recipe", "tensorwise"},
                                  {"enable_fsdp_float8_all_gather", true},
                                  {"filter_fqns", {"output"}}}));
  // One block's parameters: 2 norms of 64 and the linears (4096 + 2048 * 2 + 4096 + 3 * 8192).
  const uint64_t norms = 2 * 64, linears = 4096 + 2048 * 2 + 4096 + 3 * 8192;
  std::map<uint64_t, int> bf_sizes, ag_sizes;
  for (const auto& c : bf.collectives)
    if (c.coll == CollectiveKind::kAllGather) ++bf_sizes[c.coll_bytes];
  for (const auto& c : ag.collectives)
    if (c.coll == CollectiveKind::kAllGather) {
      ++ag_sizes[c.coll_bytes];
      if (c.coll_bytes == norms * 2 + linears) {
        EXPECT_EQ(c.dtype, DType::kUInt8);
      }
    }
  EXPECT_EQ(bf_sizes[2 * (norms + linears)], 4);  // 2 blocks, forward and backward
  EXPECT_EQ(ag_sizes[2 * norms + linears], 4);
  EXPECT_EQ(ag_sizes.count(2 * (norms + linears)), 0u);
  // Without precomputed scales, fsdp_pre_all_gather all-reduces each weight's amax (MAX).
  int amax_all_reduces = 0;
  for (const auto& c : ag.collectives)
    if (c.coll == CollectiveKind::kAllReduce && c.reduce == ReduceOp::kMax) ++amax_all_reduces;
  EXPECT_EQ(amax_all_reduces, 4 * 7);
  // The unsharded float8 weights take half the bytes: peak memory drops.
  EXPECT_LT(ag.report.classes[0].peak_allocated_bytes, bf.report.classes[0].peak_allocated_bytes);
}

// precompute_float8_dynamic_scale_for_fsdp: one all-reduce of the stacked amaxes per step after
// the optimizer, and no amax all-reduce in the all-gathers.
TEST(Float8AllGather, PrecomputedScalesAreOneAllReduce) {
  StepOps s = last_step(f8_json({{"recipe", "tensorwise"},
                                 {"enable_fsdp_float8_all_gather", true},
                                 {"precompute_float8_dynamic_scale_for_fsdp", true},
                                 {"filter_fqns", {"output"}}}));
  int max_all_reduces = 0;
  for (const auto& c : s.collectives)
    if (c.coll == CollectiveKind::kAllReduce && c.reduce == ReduceOp::kMax) {
      ++max_all_reduces;
      EXPECT_EQ(c.coll_bytes, 4u * kLinears);  // one fp32 amax per float8 weight
    }
  EXPECT_EQ(max_all_reduces, 1);
  // The casts in the pre-all-gather: * scale, clamp, .to(float8) per weight per all-gather.
  EXPECT_EQ(s.count[OpKind::kFloat8Abs], 4 * kLinears);  // only the linears' own casts of x, g
}

template <class F>
void expect_input_error(F&& f, const std::string& field, const std::string& part) {
  const std::string m = fullshard::testing::input_error_of(f);
  EXPECT_EQ(m.rfind(field, 0), 0u) << m;
  EXPECT_NE(m.find(part), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(Float8Scenario, RefusalsNameTheField) {
  auto parse = [](const json& j) { return parse_scenario(j); };
  expect_input_error(
      [&] {
        parse(f8_json({{"recipe", "tensorwise"}}, false, "a100-80gb"));
      },
      "training.float8", "no float8 tensor cores");
  expect_input_error(
      [&] {
        parse(f8_json({{"recipe", "rowwse"}}));
      },
      "training.float8.recipe", "rowwise");
  expect_input_error(
      [&] {
        parse(f8_json({{"recipe", "rowwise"}, {"enable_fsdp_float8_all_gather", true}}));
      },
      "training.float8.enable_fsdp_float8_all_gather", "tensorwise");
  expect_input_error(
      [&] {
        parse(f8_json({{"precompute_float8_dynamic_scale_for_fsdp", true}}));
      },
      "training.float8.precompute_float8_dynamic_scale_for_fsdp", "enable_fsdp_float8_all_gather");
  expect_input_error(
      [&] {
        parse(
            f8_json({{"recipe", "rowwise_with_gw_hp"}, {"filter_fqns", {"auto_filter_small_kn"}}}));
      },
      "training.float8.filter_fqns", "NotImplementedError");
  expect_input_error(
      [&] {
        parse(f8_json({{"recipes", "tensorwise"}}));
      },
      "training.float8", "recipe");
  json sel = f8_json({{"recipe", "tensorwise"}});
  sel["training"]["activation_checkpointing"] = "selective_op";
  expect_input_error([&] { parse(sel); }, "training.activation_checkpointing", "float8");
  json rf = f8_json({{"enable_fsdp_float8_all_gather", true}});
  rf["fsdp"]["reshard_after_forward"] = 1;
  expect_input_error([&] { parse(rf); }, "training.float8.enable_fsdp_float8_all_gather",
                     "NotImplementedError");
  json tp = f8_json({{"recipe", "tensorwise"}});
  tp["fsdp"]["mesh"] = {{"shape", {1, 2}}, {"dim_names", {"shard", "tp"}}};
  expect_input_error([&] { parse(tp); }, "training.float8", "tp 2");
  json one = f8_json({{"enable_fsdp_float8_all_gather", true}});
  one["fsdp"]["mesh"] = {{"shape", {1}}};
  one["hardware"]["gpus_per_node"] = 1;
  expect_input_error([&] { parse(one); }, "training.float8.enable_fsdp_float8_all_gather",
                     "shard dim");
}

// Property: over random square-ish llama shapes and recipes, each converted linear's three
// products are 2 M K N FLOPs and the scaled ones run on float8 operands.
RC_GTEST_PROP(Float8Linear, ScaledMatmulsMatchTheShapes, ()) {
  const int64_t dim = 16 * *rc::gen::inRange<int64_t>(2, 9);
  const int64_t ffn = 16 * *rc::gen::inRange<int64_t>(2, 17);
  const int64_t seq = 8 * *rc::gen::inRange<int64_t>(1, 5);
  const auto recipe = *rc::gen::element<std::string>("tensorwise", "rowwise", "rowwise_with_gw_hp");
  json j = f8_json({{"recipe", recipe}, {"filter_fqns", {"output"}}});
  j["model"] = {{"name", "tiny-llama"}, {"dim", dim},      {"ffn_dim", ffn},
                {"n_heads", 2},         {"n_kv_heads", 2}, {"n_layers", 1}};
  j["training"]["seq_len"] = seq;
  StepOps s;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    for (const auto& in : run.programs.front().instrs)
      if (in.type == sim::InstrType::kKernel && in.step == 0) s.kernels.push_back(in);
  };
  auto r = sim::simulate_scenario(parse_scenario(j), o);
  RC_ASSERT(r.ok());
  int scaled = 0;
  for (const auto& k : s.kernels) {
    const OpKind op = k.op;
    if (op == OpKind::kScaledMM || op == OpKind::kScaledMMBackwardInput ||
        op == OpKind::kScaledMMBackwardWeight) {
      ++scaled;
      RC_ASSERT(is_float8(k.dtype));
      RC_ASSERT(k.flops == 2.0 * k.dims[0] * k.dims[1] * k.dims[2]);
      RC_ASSERT(k.dims[0] == 2 * seq);
    }
  }
  RC_ASSERT(scaled == 7 * (recipe == "rowwise_with_gw_hp" ? 2 : 3));
}
