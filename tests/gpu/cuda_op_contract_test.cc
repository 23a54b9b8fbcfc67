// Host-only (no GPU; any GPU is hidden first): every op the model emits, over tiny Llama and
// GPT-2 programs (every SDPA backend including efficient attention above head_dim 128, compiled
// blocks, eager decompositions, tensor and loss parallelism, mixture of experts, float8, pipeline
// stages' split backward, context parallelism's ring rounds), meets the operand contracts of both
// real backends: the CPU reference kernel runs it (on zeroed host buffers laid out as the program
// lays them out), and the CUDA dispatcher's checks (arity, sizes, dtypes, NOTE [Operand
// alignment]) accept it and reach the launch, which fails here for want of a device. A model
// that emits an op one backend's contract refuses (the GPU run's AttentionEfficient with its
// output accumulator, which the CPU reference took as 3 outputs for 2) fails here, not on a GPU.
// Every operand also starts at a multiple of its element size in its buffer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "backends/common/kernel_families.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/scaled_gemm_plan.h"
#include "core/common/error.h"
#include "core/runtime/op_table.h"
#include "tests/gpu/recorded_ops.h"

namespace fullshard {
namespace {

using nlohmann::json;

// Host memory per buffer id, as large as its furthest operand; 256-byte aligned bases.
struct HostBuffers {
  std::map<uint64_t, std::vector<double>> mem;  // doubles: 8-byte aligned storage
  explicit HostBuffers(const std::vector<OpCall>& ops) {
    std::map<uint64_t, uint64_t> size;
    for (const OpCall& op : ops)
      for (const auto* refs : {&op.inputs, &op.outputs})
        for (const TensorRef& r : *refs)
          size[r.buffer_id] = std::max(size[r.buffer_id], r.offset_bytes + r.nbytes());
    for (auto& [id, bytes] : size) mem[id].assign(bytes / 8 + 64, 0.0);
  }
  void* at(const TensorRef& r) {
    auto* base = reinterpret_cast<unsigned char*>(mem.at(r.buffer_id).data());
    return base + r.offset_bytes;
  }
};

// Fake device addresses with the program's layout: buffer i at (i + 1) * 2^32, operand at its
// offset. Never dereferenced: the launch fails first (no device).
void* device_address(const TensorRef& r) {
  return reinterpret_cast<void*>(((r.buffer_id + 1) << 32) + r.offset_bytes);
}

struct Checked {
  std::set<OpKind> kinds;
  size_t ops = 0;
};

void check_program(const json& j, const std::string& label, Checked& seen) {
  SCOPED_TRACE(label);
  const Scenario s = parse_scenario(j);
  const std::vector<OpCall> ops = recorded_ops::record(s);
  ASSERT_FALSE(ops.empty());
  HostBuffers host(ops);
  for (const OpCall& op : ops) {
    if (op.kind == OpKind::kLoadBatch || op.kind == OpKind::kInitParam)
      continue;  // the backends' own host work
    const std::string what = std::string(op_kind_name(op.kind)) + " '" + op.name + "'";
    for (const auto* refs : {&op.inputs, &op.outputs})
      for (const TensorRef& r : *refs)
        EXPECT_EQ(r.offset_bytes % dtype_size(r.meta.dtype), 0u)
            << what << ": operand at byte " << r.offset_bytes;
    std::vector<void*> ci, co, gi, go;
    for (const TensorRef& r : op.inputs) ci.push_back(host.at(r)), gi.push_back(device_address(r));
    for (const TensorRef& r : op.outputs) co.push_back(host.at(r)), go.push_back(device_address(r));
    try {
      cpu::run_kernel(op, ci, co);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "CPU reference refused " << what << ": " << e.what();
    }
    // The dispatcher's checks run before anything is enqueued (cuda_kernels.h); passing them, the
    // op reaches a launch (or the cuBLASLt handle check), which cannot succeed without a device.
    std::string message = "launched";
    cuda::KernelContext ctx;
    if (op.kind == OpKind::kScaledMM || op.kind == OpKind::kScaledMMBackwardInput ||
        op.kind == OpKind::kScaledMMBackwardWeight) {  // NOTE [Float8 GEMM staging], a fake address
      ctx.float8_staging = reinterpret_cast<void*>(uintptr_t{1} << 44);
      ctx.float8_staging_bytes = cuda::plan::plan_scaled_gemm(op).scratch_bytes;
    }
    try {
      cuda::launch_kernel(op, gi, go, ctx);
    } catch (const std::exception& e) {
      message = e.what();
    }
    const bool reached_launch =
        message == "launched" ||  // nothing to enqueue (an empty op)
        message.rfind("CUDA kernel launch '", 0) == 0 ||
        message.find("no cuBLASLt handle in the kernel context") != std::string::npos ||
        message.find("cudaErrorNoDevice") != std::string::npos ||
        message.find("no CUDA-capable device") != std::string::npos ||
        message.find("CUDA driver version is insufficient") != std::string::npos;
    EXPECT_TRUE(reached_launch) << "CUDA dispatch refused " << what << ": " << message;
    seen.kinds.insert(op.kind);
    ++seen.ops;
  }
}

TEST(CudaOpContracts, EveryOpTheModelsEmitMeetsBothBackendsContracts) {
  Checked seen;
  using recorded_ops::scenario_json;
  for (const char* preset : {"fullshard", "torchtitan-2024-04", "torchtitan", "hf-transformers"})
    check_program(scenario_json("tiny-llama", {{"preset", preset}}, {2}),
                  std::string("tiny-llama ") + preset, seen);
  check_program(
      scenario_json("tiny-llama", {{"attention", "efficient"}, {"gqa", "repeat_kv"}}, {2}),
      "tiny-llama efficient", seen);
  // head_dim 256: efficient attention passes its fp32 output accumulator (a third output).
  const json wide_heads = {{"name", "tiny-llama"}, {"n_heads", 1}, {"n_kv_heads", 1}, {"dim", 256}};
  check_program(scenario_json(wide_heads, {{"attention", "efficient"}}, {2}),
                "tiny-llama efficient head_dim 256", seen);
  check_program(scenario_json(wide_heads, {{"attention", "cudnn"}}, {2}),
                "tiny-llama cudnn head_dim 256", seen);
  check_program(scenario_json("tiny-llama", {{"attention", "cudnn"}}, {2}), "tiny-llama cudnn",
                seen);
  check_program(scenario_json("tiny-llama", {{"compile", true}}, {2}), "tiny-llama compile", seen);
  check_program(scenario_json("tiny-llama", {{"compile", true}}, {2},
                              {{"training", {{"activation_checkpointing", "selective_op"}}}}),
                "tiny-llama compile selective_op", seen);
  check_program(scenario_json("tiny-llama", nullptr, {2},
                              {{"training", {{"activation_checkpointing", "full"}}}}),
                "tiny-llama full AC", seen);
  for (const char* loss : {"fp32_logits", "bf16_logits", "fp32_output"})
    check_program(scenario_json("tiny-llama", {{"loss", loss}}, {2}),
                  std::string("tiny-llama loss ") + loss, seen);
  check_program(scenario_json("tiny-gpt2", nullptr, {2}), "tiny-gpt2", seen);
  // bf16 parameters with fp32 reduction, as the GPU scenarios train (casts, cuDNN's own path).
  const json bf16 = {
      {"fsdp", {{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}}}};
  check_program(scenario_json("tiny-llama", nullptr, {2}, bf16), "tiny-llama bf16", seen);
  check_program(scenario_json("tiny-llama", {{"attention", "cudnn"}}, {2}, bf16),
                "tiny-llama cudnn bf16", seen);
  check_program(scenario_json(wide_heads, {{"attention", "efficient"}}, {2}, bf16),
                "tiny-llama efficient 256 bf16", seen);
  check_program(scenario_json("tiny-llama", {{"compile", true}}, {2}, bf16),
                "tiny-llama compile bf16", seen);
  check_program(scenario_json("tiny-gpt2", nullptr, {2}, bf16), "tiny-gpt2 bf16", seen);
  check_program(scenario_json("tiny-llama", nullptr, {1, 2},
                              {{"tensor_parallel", {{"loss_parallel", true}}}}),
                "tiny-llama tp2 loss_parallel", seen);
  check_program(scenario_json("tiny-llama", nullptr, {1, 2},
                              {{"tensor_parallel", {{"loss_parallel", false}}}}),
                "tiny-llama tp2", seen);
  check_program(scenario_json("tiny-gpt2", nullptr, {1, 2}), "tiny-gpt2 tp2", seen);
  // torchao's tensorwise float8 (the recipe the CUDA backend runs; docs/float8.md): eager and
  // compiled casts, fp32 and bf16 parameters, the float8 all-gather with precomputed scales.
  const json float8 = {
      {"training", {{"float8", {{"recipe", "tensorwise"}, {"filter_fqns", {"output"}}}}}}};
  check_program(scenario_json("tiny-llama", nullptr, {2}, float8), "tiny-llama float8", seen);
  json float8_bf16 = float8;
  float8_bf16.update(bf16, /*merge_objects=*/true);
  float8_bf16["training"]["float8"]["enable_fsdp_float8_all_gather"] = true;
  float8_bf16["training"]["float8"]["precompute_float8_dynamic_scale_for_fsdp"] = true;
  check_program(scenario_json("tiny-llama", nullptr, {2}, float8_bf16),
                "tiny-llama float8 all-gather bf16", seen);
  check_program(scenario_json("tiny-llama", {{"compile", true}}, {2}, float8_bf16),
                "tiny-llama float8 compile bf16", seen);
  // Mixture of experts (docs/moe.md; backends/cuda/kernels/moe_plan.h): ep 1, bf16, and ep 2.
  check_program(scenario_json("tiny-moe", nullptr, {2}), "tiny-moe", seen);
  check_program(scenario_json("tiny-moe", nullptr, {2}, bf16), "tiny-moe bf16", seen);
  check_program(scenario_json("tiny-moe", nullptr, {4}, {{"expert_parallel", {{"degree", 2}}}}),
                "tiny-moe ep 2", seen);
  // Capacity-factor dropping (NOTE [Capacity factor] in core/model/moe_routing.h) at ep 2: the
  // kept rows sliced off before the dispatch.
  check_program(scenario_json({{"name", "tiny-moe"}, {"moe", {{"capacity_factor", 1.0}}}}, nullptr,
                              {4}, {{"expert_parallel", {{"degree", 2}}}}),
                "tiny-moe capacity ep 2", seen);
  // Pipeline stages (docs/pipeline.md): ZBVZeroBubble's split backward on the rank holding the
  // first and the last stage. Context parallelism (docs/context-parallel.md): ring attention's
  // rounds (strided halves), merges and row adds, fp32 and bf16.
  check_program(scenario_json("tiny-llama", nullptr, {2, 1},
                              {{"fsdp", {{"mesh", {{"dim_names", {"pp", "dp_shard"}}}}}},
                               {"training", {{"batch_per_rank", 8}}},
                               {"pipeline_parallel",
                                {{"schedule", "ZBVZeroBubble"}, {"microbatch_size", 2}}}}),
                "tiny-llama pp2 ZBVZeroBubble", seen);
  const json cp = {{"fsdp", {{"mesh", {{"dim_names", {"dp_shard", "cp"}}}}}},
                   {"context_parallel", {{"rotate_method", "alltoall"}}}};
  check_program(scenario_json("tiny-llama", nullptr, {1, 2}, cp), "tiny-llama cp2", seen);
  json cp_bf16 = cp;
  cp_bf16.update(bf16, /*merge_objects=*/true);
  check_program(scenario_json("tiny-llama", nullptr, {1, 2}, cp_bf16), "tiny-llama cp2 bf16", seen);
  for (OpKind k : {OpKind::kSdpaMerge, OpKind::kSeqRowsAdd, OpKind::kRMSNormBackwardInput,
                   OpKind::kRMSNormBackwardWeight})
    EXPECT_TRUE(seen.kinds.count(k)) << op_kind_name(k) << " (the pp / cp programs)";
  for (size_t i = 0; i < kOpKindCount; ++i) {
    const auto k = static_cast<OpKind>(i);
    if (backends::is_moe_kind(k) && k != OpKind::kSigmoid && k != OpKind::kSigmoidBackward) {
      EXPECT_TRUE(seen.kinds.count(k)) << op_kind_name(k) << " (tiny-moe scores with softmax)";
    }
  }
  for (OpKind k :
       {OpKind::kFloat8Abs, OpKind::kFloat8Amax, OpKind::kFloat8Scale, OpKind::kFloat8Cast,
        OpKind::kScaledMM, OpKind::kScaledMMBackwardInput, OpKind::kScaledMMBackwardWeight})
    EXPECT_TRUE(seen.kinds.count(k)) << op_kind_name(k);
  EXPECT_GE(seen.kinds.size(), 40u) << "the programs above should reach most op kinds";
  EXPECT_TRUE(seen.kinds.count(OpKind::kAttentionEfficient));
  std::printf("%zu ops of %zu kinds checked against both backends\n", seen.ops, seen.kinds.size());
}

}  // namespace
}  // namespace fullshard

int main(int argc, char** argv) {
  // Hide any GPU before CUDA initialises: every launch must fail, never run on fake addresses.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
