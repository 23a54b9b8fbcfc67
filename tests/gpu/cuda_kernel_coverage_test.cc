// Host-only (no GPU): every op kind the model emits onto the device, over the scenarios a
// user can train on the CUDA backend (every model.implementation preset and field value, both
// architectures, activation checkpointing, CPU offload, tensor parallelism, compiled blocks,
// tensorwise float8,
// mixture of experts at ep 1 and 2, pipeline stages under 1F1B and ZBVZeroBubble, context
// parallelism under both rotate methods) has a CUDA kernel (cuda::has_kernel). The programs come from the simulator, which records
// the same host program the CUDA backend runs. Async TP is simulator-only (the launcher refuses
// it on every real backend), so its fused collective-matmuls are the kinds left without one.
#include <gtest/gtest.h>

#include "core/runtime/op_table.h"

#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "backends/cuda/kernels/cuda_kernels.h"
#include "core/scenario/scenario.h"
#include "simulator/engine/program.h"
#include "simulator/simulate.h"
#include "tests/gpu/recorded_ops.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

// The device op kinds of every rank program of `j`, with where they first appeared.
std::map<OpKind, std::string> device_kinds(const json& j, const std::string& label) {
  std::map<OpKind, std::string> kinds;
  sim::SimulateOptions o;
  o.all_ranks = true;
  o.on_played = [&](const sim::PlayedRun& run) {
    for (const auto& prog : run.programs)
      for (const auto& in : prog.instrs)
        if (in.type == sim::InstrType::kKernel && in.place == sim::KernelPlace::kDevice)
          kinds.emplace(in.op, label + ": " + prog.names.at(in.name));
  };
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(r.ok()) << label << ": " << testing::problems_text(r);
  return kinds;
}

// The recorded-ops scenario (recorded_ops.h), always with an implementation object.
json scenario(const json& model, const json& implementation, const std::vector<int>& mesh,
              const json& extra = {}) {
  return recorded_ops::scenario_json(model, implementation, mesh,
                                     extra.is_null() ? json::object() : extra);
}

TEST(CudaKernelCoverage, EveryDeviceOpTheModelEmitsHasAKernel) {
  std::map<OpKind, std::string> all;
  auto add = [&](const json& j, const std::string& label) {
    for (auto& [k, where] : device_kinds(j, label)) all.emplace(k, where);
  };
  const json presets[] = {"fullshard", "torchtitan-2024-04", "torchtitan-2024", "torchtitan",
                          "hf-transformers"};
  for (const json& p : presets) {
    const std::string name = p.get<std::string>();
    add(scenario("tiny-llama", {{"preset", p}}, {2}), "tiny-llama " + name);
    add(scenario("tiny-llama", {{"preset", p}}, {2},
                 {{"training", {{"activation_checkpointing", "full"}}}}),
        "tiny-llama " + name + " full AC");
  }
  for (const char* loss : {"fp32_logits", "bf16_logits", "fp32_output"})
    add(scenario("tiny-llama", {{"loss", loss}}, {2}), std::string("tiny-llama loss ") + loss);
  add(scenario("tiny-llama", {{"attention", "efficient"}, {"gqa", "repeat_kv"}}, {2}),
      "tiny-llama efficient");
  add(scenario("tiny-llama", {{"attention", "cudnn"}}, {2}), "tiny-llama cudnn");
  add(scenario("tiny-llama", {{"rope", "rotate_half"}, {"rms_norm", "eager"}}, {2}),
      "tiny-llama eager norm");
  add(scenario("tiny-llama", {{"compile", true}}, {2}), "tiny-llama compile");
  add(scenario("tiny-llama", {{"compile", true}}, {2},
               {{"training", {{"activation_checkpointing", "selective_op"}}}}),
      "tiny-llama compile selective_op");
  add(scenario("tiny-gpt2", json::object(), {2}), "tiny-gpt2");
  add(scenario("tiny-llama", json::object(), {2}, {{"fsdp", {{"cpu_offload", true}}}}),
      "tiny-llama offload");
  add(scenario("tiny-llama", json::object(), {1, 2},
               {{"tensor_parallel", {{"loss_parallel", true}}}}),
      "tiny-llama tp2 loss_parallel");
  add(scenario("tiny-llama", json::object(), {1, 2},
               {{"tensor_parallel", {{"loss_parallel", false}}}}),
      "tiny-llama tp2");
  add(scenario("tiny-gpt2", json::object(), {1, 2}), "tiny-gpt2 tp2");
  add(scenario("tiny-llama", {{"loss", "chunked"}}, {1, 2},
               {{"tensor_parallel", {{"loss_parallel", true}}}}),
      "tiny-llama tp2 chunked loss");

  // torchao's tensorwise float8 (the recipe the CUDA backend runs): eager, compiled, and the
  // float8 all-gather with precomputed scales.
  const json float8 = {{"training",
                        {{"float8",
                          {{"recipe", "tensorwise"},
                           {"enable_fsdp_float8_all_gather", true},
                           {"precompute_float8_dynamic_scale_for_fsdp", true},
                           {"filter_fqns", {"output"}}}}}}};
  add(scenario("tiny-llama", json::object(), {2}, float8), "tiny-llama float8");
  add(scenario("tiny-llama", {{"compile", true}}, {2}, float8), "tiny-llama float8 compile");

  // Mixture of experts (docs/moe.md): tiny-moe at ep 1 and expert-parallel, bf16, full AC.
  const json moe_bf16 = {
      {"fsdp", {{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}}}};
  add(scenario("tiny-moe", json::object(), {2}), "tiny-moe");
  add(scenario("tiny-moe", json::object(), {2}, moe_bf16), "tiny-moe bf16");
  add(scenario("tiny-moe", json::object(), {2},
               {{"training", {{"activation_checkpointing", "full"}}}}),
      "tiny-moe full AC");
  add(scenario("tiny-moe", json::object(), {4}, {{"expert_parallel", {{"degree", 2}}}}),
      "tiny-moe ep 2");
  for (OpKind k : {OpKind::kTopK, OpKind::kPermuteIndices, OpKind::kGroupedMMBackwardWeight,
                   OpKind::kIndexAddRows, OpKind::kWeightedSumBackward})
    EXPECT_TRUE(all.count(k)) << op_kind_name(k) << ": the MoE programs should reach it";

  // Pipeline parallelism (docs/pipeline.md): 1F1B, and ZBVZeroBubble's split backward (I and W,
  // kRMSNormBackwardInput / Weight). Context parallelism (docs/context-parallel.md): ring
  // attention under both rotate methods, fp32 and bf16 (the rounds after the first run
  // context_parallel.cu's ring kernels; kSdpaMerge, kSeqRowsAdd).
  auto pp = [](const char* schedule, int microbatch_size) {
    return json{{"fsdp", {{"mesh", {{"dim_names", {"pp", "dp_shard"}}}}}},
                {"training", {{"batch_per_rank", 8}}},
                {"pipeline_parallel",
                 {{"schedule", schedule}, {"microbatch_size", microbatch_size}}}};
  };
  add(scenario("tiny-llama", json::object(), {2, 2}, pp("1F1B", 2)), "tiny-llama pp2 1F1B");
  add(scenario("tiny-llama", json::object(), {2, 2}, pp("ZBVZeroBubble", 2)),
      "tiny-llama pp2 ZBVZeroBubble");
  for (const char* rotate : {"allgather", "alltoall"}) {
    const json cp = {{"fsdp", {{"mesh", {{"dim_names", {"dp_shard", "cp"}}}}}},
                     {"context_parallel", {{"rotate_method", rotate}}}};
    add(scenario("tiny-llama", json::object(), {1, 2}, cp),
        std::string("tiny-llama cp2 ") + rotate);
    json bf16 = cp;
    bf16["fsdp"]["mixed_precision"] = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
    add(scenario("tiny-llama", json::object(), {1, 2}, bf16),
        std::string("tiny-llama cp2 bf16 ") + rotate);
  }
  for (OpKind k : {OpKind::kSdpaMerge, OpKind::kSeqRowsAdd, OpKind::kRMSNormBackwardInput,
                   OpKind::kRMSNormBackwardWeight})
    EXPECT_TRUE(all.count(k)) << op_kind_name(k) << ": the pp / cp programs should reach it";

  EXPECT_GE(all.size(), 40u) << "the variants above should reach most op kinds";
  for (const auto& [kind, where] : all) {
    if (kind == OpKind::kLoadBatch || kind == OpKind::kInitParam)
      continue;  // the backend's own host work
    EXPECT_TRUE(cuda::has_kernel(kind))
        << op_kind_name(kind) << " (first in " << where << ") has no CUDA kernel";
  }
  std::printf("%zu device op kinds reached\n", all.size());
}

// has_kernel against the dispatcher itself: an op of each kind with no operands either reaches
// its kernel's operand checks (a kernel exists) or the dispatcher's refusal of the kind. Nothing
// is launched: every kernel's checks refuse an op without operands first.
TEST(CudaKernelCoverage, HasKernelAgreesWithTheDispatcher) {
  for (size_t k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (kind == OpKind::kLoadBatch || kind == OpKind::kInitParam) {
      EXPECT_FALSE(cuda::has_kernel(kind));
      continue;
    }
    if (!cuda::has_kernel(kind)) {  // refused before the dispatcher: device_kernels.h
      if (op_info(kind).has(kOpSimulatedOnly)) EXPECT_FALSE(has_device_kernel(kind));
      continue;
    }
    OpCall op;
    op.kind = kind;
    op.name = "probe";
    std::string message;
    try {
      cuda::launch_kernel(op, {}, {}, cuda::KernelContext{});
    } catch (const std::exception& e) {
      message = e.what();
    }
    const bool refused = message.find("not supported on the CUDA backend") != std::string::npos ||
                         message.find("no CUDA kernel") != std::string::npos;
    EXPECT_FALSE(message.empty()) << op_kind_name(kind)
                                  << ": an op without operands was not refused";
    EXPECT_EQ(cuda::has_kernel(kind), !refused) << op_kind_name(kind) << ": " << message;
  }
}

}  // namespace
}  // namespace fullshard
