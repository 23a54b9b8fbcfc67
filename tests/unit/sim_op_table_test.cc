// The op table (core/runtime/op_kinds.def, NOTE [One op table] in op_table.h): every kind has a
// row with its name, arity and argument struct; the property functions read it; and the host
// programs the model records (the simulator's backend, the same program every backend runs)
// fit every row's arity and decode with its argument struct, over the variants a user can run.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"
#include "core/runtime/op_table.h"
#include "tests/gpu/recorded_ops.h"

namespace fullshard {
namespace {

using nlohmann::json;

TEST(OpTable, EveryKindHasItsRowNameAndArgumentStruct) {
  ASSERT_EQ(kOpKindCount, static_cast<size_t>(OpKind::kRMSNormBackwardWeight) + 1)
      << "the enum's last kind is the table's last row";
  std::set<std::string> names;
  for (size_t i = 0; i < kOpKindCount; ++i) {
    const auto k = static_cast<OpKind>(i);
    const OpInfo& t = op_info(k);
    EXPECT_EQ(t.kind, k) << i;
    ASSERT_NE(t.name, nullptr);
    EXPECT_FALSE(std::string(t.name).empty()) << i;
    EXPECT_STREQ(op_kind_name(k), t.name);
    EXPECT_TRUE(names.insert(t.name).second) << t.name << " named twice";
    EXPECT_FALSE(std::string(t.args).empty()) << t.name;
    EXPECT_GE(t.in_min, 0) << t.name;
    EXPECT_GE(t.out_min, 0) << t.name;
    EXPECT_TRUE(t.in_max == OpInfo::kMany || t.in_max >= t.in_min) << t.name;
    EXPECT_TRUE(t.out_max == OpInfo::kMany || t.out_max >= t.out_min) << t.name;
  }
  EXPECT_STREQ(op_kind_name(OpKind::kAttentionBackward), "AttentionBackward");
}

TEST(OpTable, PropertyFunctionsReadTheTable) {
  for (size_t i = 0; i < kOpKindCount; ++i) {
    const auto k = static_cast<OpKind>(i);
    EXPECT_EQ(op_uses_blas(k), op_info(k).has(kOpBlas)) << op_kind_name(k);
    EXPECT_EQ(is_compiled_region(k), op_info(k).has(kOpCompiled)) << op_kind_name(k);
    EXPECT_EQ(has_device_kernel(k),
              !op_info(k).has(kOpHostFill) && !op_info(k).has(kOpSimulatedOnly))
        << op_kind_name(k);
  }
  // The kinds PyTorch runs through cuBLAS, and the ones that are not kernels at all.
  for (OpKind k : {OpKind::kLinear, OpKind::kLinearBackwardInput, OpKind::kLinearBackwardWeight,
                   OpKind::kAllGatherMatmul, OpKind::kMatmulReduceScatter})
    EXPECT_TRUE(op_uses_blas(k)) << op_kind_name(k);
  EXPECT_FALSE(op_uses_blas(OpKind::kLinearBackwardBias));
  EXPECT_FALSE(op_uses_blas(OpKind::kAttention));
  EXPECT_TRUE(is_compiled_region(OpKind::kCompiledResidualAdd));
  EXPECT_FALSE(is_compiled_region(OpKind::kRMSNorm));
  EXPECT_FALSE(has_device_kernel(OpKind::kLoadBatch));
  EXPECT_FALSE(has_device_kernel(OpKind::kInitParam));
  EXPECT_FALSE(has_device_kernel(OpKind::kAllGatherMatmul));
  EXPECT_TRUE(has_device_kernel(OpKind::kAdamW));
}

// Every kind reaches a decoder: an op of the kind without operands or attributes is refused,
// naming the kind (no kind falls through to "is not an op kind").
TEST(OpTable, EveryKindHasADecoderThatNamesIt) {
  for (size_t i = 0; i < kOpKindCount; ++i) {
    OpCall op;
    op.kind = static_cast<OpKind>(i);
    op.name = "probe";
    std::string message;
    try {
      validate_op_args(op);
    } catch (const InternalError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(op_info(op.kind).name), std::string::npos)
        << op_info(op.kind).name << ": " << (message.empty() ? "accepted" : message);
    EXPECT_EQ(message.find("is not an op kind"), std::string::npos) << message;
  }
}

json scenario(const json& model, const json& implementation, const std::vector<int>& mesh,
              const json& extra = json::object()) {
  return recorded_ops::scenario_json(model, implementation, mesh, extra);
}

// The model's host programs against the table: each op's operand counts are within its row's
// arity and its argument struct decodes it (what every backend's kernel does first).
TEST(OpTable, RecordedProgramsFitTheTableAndDecode) {
  std::map<OpKind, int> seen;
  auto check = [&](const json& j, const std::string& label) {
    const Scenario s = parse_scenario(j);
    for (int rank : {0, s.world_size() - 1}) {
      for (const OpCall& op : recorded_ops::record(s, rank)) {
        const OpInfo& t = op_info(op.kind);
        EXPECT_TRUE(t.inputs_ok(op.inputs.size()) && t.outputs_ok(op.outputs.size()))
            << label << ": " << t.name << " '" << op.name << "' has " << op.inputs.size()
            << " inputs and " << op.outputs.size() << " outputs";
        try {
          validate_op_args(op);
        } catch (const InternalError& e) {
          ADD_FAILURE() << label << ": " << e.what();
        }
        ++seen[op.kind];
      }
    }
  };
  const json presets[] = {"fullshard", "torchtitan-2024-04", "torchtitan-2024", "torchtitan",
                          "hf-transformers"};
  for (const json& p : presets)
    check(scenario("tiny-llama", {{"preset", p}}, {2}), "tiny-llama " + p.get<std::string>());
  check(scenario("tiny-llama", {{"attention", "efficient"}, {"gqa", "repeat_kv"}}, {2}),
        "efficient");
  check(scenario("tiny-llama", {{"attention", "cudnn"}}, {2}), "cudnn");
  check(scenario("tiny-llama", {{"rope", "rotate_half"}, {"rms_norm", "eager"}}, {2}), "eager");
  check(scenario("tiny-llama", {{"compile", true}}, {2},
                 {{"training", {{"activation_checkpointing", "selective_op"}}}}),
        "compile");
  check(scenario("tiny-gpt2", json::object(), {2}), "tiny-gpt2");
  check(scenario("tiny-llama", json::object(), {1, 2},
                 {{"tensor_parallel", {{"loss_parallel", true}}}}),
        "tp2 loss_parallel");
  check(scenario("tiny-gpt2", json::object(), {1, 2}), "tiny-gpt2 tp2");
  check(
      scenario("tiny-llama", {{"compile", true}}, {1, 2}, {{"tensor_parallel", {{"async", true}}}}),
      "async tp");
  // training.float8 (docs/float8.md): eager and compiled casts, float8 all-gather, precompute.
  for (const char* recipe : {"tensorwise", "rowwise", "rowwise_with_gw_hp"})
    check(scenario("tiny-llama", json::object(), {2},
                   {{"training", {{"float8", {{"recipe", recipe}}}}}}),
          std::string("float8 ") + recipe);
  check(scenario("tiny-llama", {{"compile", true}}, {2},
                 {{"training",
                   {{"steps", 2},
                    {"float8",
                     {{"enable_fsdp_float8_all_gather", true},
                      {"precompute_float8_dynamic_scale_for_fsdp", true}}}}}}),
        "float8 all-gather compiled");
  // QLoRA's NF4 base (docs/qlora.md): to_nf4 at init, the dequantise of each frozen linear.
  check(scenario(
            json{{"name", "tiny-llama"},
                 {"lora", {{"rank", 4}, {"alpha", 8}, {"target_modules", {"q_proj"}}}}},
            nullptr, {2},
            {{"training",
              {{"frozen_dtype", "nf4"}, {"nf4", {{"block_size", 64}, {"scaler_block_size", 16}}}}},
             {"fsdp", {{"mixed_precision", {{"param_dtype", "bf16"}}}}}}),
        "qlora nf4");
  // DeepSeek-V3's expert bias and group-limited routing (NOTE [Expert bias] in
  // core/model/expert_bias.h): the choice, the gathered gate, the pre-step stack and update.
  check(scenario(json{{"name", "tiny-deepseek"},
                      {"moe",
                       {{"load_balance", "expert_bias"},
                        {"load_balance_coeff", 1e-3},
                        {"num_expert_groups", 2},
                        {"num_limited_groups", 1}}}},
                 nullptr, {2}, {{"training", {{"activation_checkpointing", "full"}}}}),
        "expert bias and groups");
  for (OpKind k : {OpKind::kRouterChoice, OpKind::kGatherScores, OpKind::kExpertLoadStack,
                   OpKind::kExpertBiasUpdate})
    EXPECT_GE(seen[k], 1) << op_kind_name(k);
  // Hugging Face's auxiliary loss (NOTE [Auxiliary load-balancing loss] in
  // core/model/moe_aux_loss.h): the column sums, the loss term and its gradient, per MoE layer.
  check(scenario(json{{"name", "tiny-moe"},
                      {"moe", {{"load_balance", "aux_loss"}, {"load_balance_coeff", 0.01}}}},
                 nullptr, {2}),
        "aux loss");
  for (OpKind k : {OpKind::kAddSumRows, OpKind::kMoeAuxLoss, OpKind::kMoeAuxLossBackward})
    EXPECT_GE(seen[k], 1) << op_kind_name(k);
  EXPECT_GE(seen[OpKind::kNF4Quantize], 1);
  EXPECT_GE(seen[OpKind::kNF4Dequantize], 1);
  EXPECT_GE(seen.size(), 60u) << "the variants above should reach most op kinds";
  std::string missing;
  for (size_t i = 0; i < kOpKindCount; ++i)
    if (!seen.count(static_cast<OpKind>(i)))
      missing += std::string(" ") + op_kind_name(static_cast<OpKind>(i));
  std::printf("%zu of %zu op kinds recorded; not reached:%s\n", seen.size(), kOpKindCount,
              missing.c_str());
}

}  // namespace
}  // namespace fullshard
