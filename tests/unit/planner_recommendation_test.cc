// The planner's answer where it is obvious by hand, its report (OUT.json's schema, the text,
// the family reasons) and its bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "simulator/planner/families.h"
#include "simulator/planner/plan_report.h"
#include "simulator/planner/planner.h"

namespace fullshard::planner {
namespace {

using nlohmann::json;

PlanOptions options(const json& model, int nodes, int gpn, int seq, int64_t global_batch,
                    std::optional<uint64_t> capacity) {
  json hw = {{"profile", "h100-sxm-80gb"}, {"nodes", nodes}, {"gpus_per_node", gpn}};
  if (capacity) {
    hw["memory_bytes"] = *capacity + (uint64_t{1} << 30);
    hw["non_allocator_bytes"] = uint64_t{1} << 30;
  }
  PlanOptions o;
  o.base = parse_scenario(
      {{"model", model}, {"training", {{"seq_len", seq}, {"steps", 2}}}, {"hardware", hw}});
  o.space.gpus = nodes * gpn;
  o.space.gpus_per_node = gpn;
  o.space.n_layers = o.base.model.n_layers;
  o.space.global_batch = global_batch;
  return o;
}

// A model whose fp32 training state cannot fit: without offload, the fp32 parameters, their
// gradients and AdamW's two states take 16 bytes per parameter on the GPU at the optimizer
// step (whatever the precision: bf16 is only the compute copy); give one GPU 8 bytes per
// parameter (beside PyTorch's two 32 MiB cuBLAS workspaces, NOTE [cuBLAS workspaces]) and only
// CPU offload (states on the host) can fit.
TEST(PlannerRecommendation, StatesThatOnlyFitWithOffload) {
  const json model = {
      {"name", "tiny-llama"}, {"dim", 512}, {"ffn_dim", 1024}, {"n_layers", 3}, {"n_heads", 8}};
  PlanOptions probe = options(model, 1, 1, 32, 1, std::nullopt);
  const int64_t params = parameter_count(probe.base.model);
  PlanOptions o = options(
      model, 1, 1, 32, 1,
      static_cast<uint64_t>(8 * params) + 2 * probe.base.hardware.device.blas_workspace_bytes);
  const PlanResult r = plan(o);
  ASSERT_TRUE(r.best_fits());
  EXPECT_TRUE(r.configs.front().candidate.cpu_offload);
  size_t fitting = 0;
  for (const auto& c : r.configs) {
    if (!c.candidate.cpu_offload) {
      EXPECT_FALSE(c.fits) << candidate_text(c.candidate);
      EXPECT_GE(c.needed_bytes, static_cast<uint64_t>(16 * params)) << candidate_text(c.candidate);
    }
    if (c.fits) ++fitting;
  }
  EXPECT_GT(fitting, 0u);
  // The family reason for keeping the states on the GPU is memory.
  bool said = false;
  for (const auto& f : family_reasons(r))
    if (f.setting == "cpu_offload" && f.value == "off") {
      said = true;
      EXPECT_NE(f.reason.find("out of memory by"), std::string::npos) << f.reason;
    }
  EXPECT_TRUE(said);
}

// The same model with the node's host memory too small for what offload pins there (NOTE [Host
// memory per node]): nothing fits, and the closest is an offload configuration that fits the GPU
// and says so; with exactly the bytes it pins, it fits again.
TEST(PlannerRecommendation, OffloadNeedsTheNodesHostMemory) {
  const json model = {
      {"name", "tiny-llama"}, {"dim", 512}, {"ffn_dim", 1024}, {"n_layers", 3}, {"n_heads", 8}};
  PlanOptions probe = options(model, 1, 1, 32, 1, std::nullopt);
  const int64_t params = parameter_count(probe.base.model);
  PlanOptions o = options(
      model, 1, 1, 32, 1,
      static_cast<uint64_t>(8 * params) + 2 * probe.base.hardware.device.blas_workspace_bytes);
  const PlanResult roomy = plan(o);  // the profile's 2 TiB per node
  ASSERT_TRUE(roomy.best_fits());
  const ConfigResult& best = roomy.configs.front();
  ASSERT_TRUE(best.candidate.cpu_offload);
  // fp32 sharded parameters, gradients and two AdamW states on the host: 16 bytes a parameter.
  EXPECT_GE(best.host_bytes_per_node, static_cast<uint64_t>(16 * params));
  EXPECT_EQ(best.host_over_bytes, 0u);
  EXPECT_EQ(roomy.host_memory_bytes, o.base.hardware.device.host_memory_bytes);

  PlanOptions tight = o;
  tight.base.hardware.device.host_memory_bytes = best.host_bytes_per_node - 1;
  const PlanResult r = plan(tight);
  EXPECT_FALSE(r.best_fits());
  for (const auto& c : r.configs) {
    EXPECT_FALSE(c.fits) << candidate_text(c.candidate);
    if (c.verdict == Verdict::kSimulated && !c.candidate.cpu_offload) {
      EXPECT_EQ(c.host_bytes_per_node, 0u);
    }
    if (c.verdict == Verdict::kSimulated && c.candidate.cpu_offload && c.over_bytes == 0) {
      EXPECT_EQ(c.host_over_bytes,
                c.host_bytes_per_node - tight.base.hardware.device.host_memory_bytes);
    }
  }
  const ConfigResult& closest = r.configs.front();
  EXPECT_TRUE(closest.candidate.cpu_offload);
  EXPECT_GT(closest.host_over_bytes, 0u);
  const std::string text = plan_text(tight, r, 3, 0);
  EXPECT_NE(text.find("host+"), std::string::npos) << text;
  EXPECT_NE(text.find("but a node needs"), std::string::npos) << text;
  const json j = plan_json(tight, r, 0);
  EXPECT_EQ(j["host_memory_bytes"], tight.base.hardware.device.host_memory_bytes);
  EXPECT_GT(j["configs"][0]["host_over_bytes"].get<uint64_t>(), 0u);

  PlanOptions exact = o;
  exact.base.hardware.device.host_memory_bytes = best.host_bytes_per_node;
  EXPECT_TRUE(plan(exact).best_fits());
}

// A tiny model on an 80 GB GPU: everything fits, and the pruned search agrees with the
// exhaustive one on the winner.
TEST(PlannerRecommendation, TinyModelEverythingFits) {
  PlanOptions o = options("tiny-llama", 1, 2, 32, 2, std::nullopt);
  o.prune = false;
  const PlanResult all = plan(o);
  EXPECT_EQ(all.simulated, all.evaluated);
  for (const auto& c : all.configs) EXPECT_TRUE(c.fits) << candidate_text(c.candidate);
  o.prune = true;
  const PlanResult pruned = plan(o);
  ASSERT_TRUE(pruned.best_fits());
  EXPECT_TRUE(pruned.configs.front().candidate == all.configs.front().candidate);
  EXPECT_EQ(pruned.configs.front().tokens_per_s_per_gpu, all.configs.front().tokens_per_s_per_gpu);
  // Fitting configurations come first, by tokens/s.
  for (size_t i = 1; i < all.configs.size(); ++i)
    EXPECT_GE(all.configs[i - 1].tokens_per_s_per_gpu, all.configs[i].tokens_per_s_per_gpu);
}

// A compute-bound model: H100's fp32 (non-tensor-core) peak is 67 TFLOP/s against 989 for
// bf16, so no fp32 configuration can be the fastest.
TEST(PlannerRecommendation, Bf16BeatsFp32WhenComputeBound) {
  const json model = {{"name", "tiny-llama"}, {"dim", 1024},        {"ffn_dim", 4096},
                      {"n_layers", 2},        {"n_heads", 8},       {"n_kv_heads", 8},
                      {"vocab_size", 4096},   {"max_seq_len", 4096}};
  PlanOptions o = options(model, 1, 2, 2048, 2, std::nullopt);
  const PlanResult r = plan(o);
  ASSERT_TRUE(r.best_fits());
  EXPECT_NE(r.configs.front().candidate.precision, Precision::kFp32);
  for (const auto& f : family_reasons(r))
    if (f.setting == "precision" && f.value == "fp32") {
      EXPECT_NE(f.reason.find("slower than the best"), std::string::npos) << f.reason;
    }
}

TEST(PlannerRecommendation, JsonSchema) {
  PlanOptions o = options("tiny-gpt2", 1, 2, 32, 2, std::nullopt);
  const PlanResult r = plan(o);
  const json j = plan_json(o, r, 1.5);
  for (const char* k : {"model",
                        "parameters",
                        "gpu",
                        "gpus",
                        "gpus_per_node",
                        "seq_len",
                        "global_batch",
                        "headroom",
                        "capacity_bytes",
                        "usable_bytes",
                        "evaluated",
                        "simulated",
                        "memory_pruned",
                        "time_pruned",
                        "full_simulations",
                        "bound_simulations",
                        "pruning",
                        "wall_s",
                        "configs_per_s",
                        "recommended",
                        "families",
                        "configs"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["evaluated"].get<size_t>(), j["configs"].size());
  EXPECT_EQ(j["evaluated"].get<size_t>(), r.evaluated);
  EXPECT_DOUBLE_EQ(j["configs_per_s"].get<double>(), static_cast<double>(r.evaluated) / 1.5);
  int rank = 0;
  for (const json& c : j["configs"]) {
    EXPECT_EQ(c["rank"].get<int>(), ++rank);
    for (const char* k : {"fits",
                          "verdict",
                          "peak_reserved_bytes",
                          "headroom_bytes",
                          "step_time_s",
                          "tokens_per_s_per_gpu",
                          "mfu",
                          "exposed_comm_s",
                          "needed_bytes",
                          "over_bytes",
                          "mesh",
                          "sharding",
                          "reshard_after_forward",
                          "precision",
                          "param_dtype",
                          "reduce_dtype",
                          "cpu_offload",
                          "activation_checkpointing",
                          "micro_batch",
                          "grad_accum_steps",
                          "expandable_segments"})
      EXPECT_TRUE(c.contains(k)) << k;
    EXPECT_TRUE(c["fits"].is_boolean() || (c["fits"].is_null() && c["verdict"] == "time_bound"));
    EXPECT_TRUE(c["peak_reserved_bytes"].is_number_unsigned());
    if (c["fits"] == true) {
      EXPECT_EQ(c["verdict"], "simulated");
      EXPECT_TRUE(c["step_time_s"].is_number());
      EXPECT_TRUE(c["tokens_per_s_per_gpu"].is_number());
      EXPECT_TRUE(c["mfu"].is_number());
      EXPECT_EQ(c["headroom_bytes"].get<uint64_t>() + c["peak_reserved_bytes"].get<uint64_t>(),
                j["capacity_bytes"].get<uint64_t>());
    }
  }
  EXPECT_EQ(j["recommended"]["mesh"], j["configs"][0]["mesh"]);
  const std::string text = plan_text(o, r, 5, 1.5);
  EXPECT_NE(text.find("recommended: "), std::string::npos);
  EXPECT_NE(text.find("evaluated " + std::to_string(r.evaluated) + " configurations"),
            std::string::npos);
}

TEST(PlannerRecommendation, NothingFitsNamesTheClosest) {
  PlanOptions o = options("tiny-llama", 1, 2, 32, 2, uint64_t{64} << 10);  // 64 KiB per GPU
  const PlanResult r = plan(o);
  EXPECT_FALSE(r.best_fits());
  ASSERT_FALSE(r.configs.empty());
  EXPECT_EQ(r.configs.front().verdict, Verdict::kSimulated);  // the closest is exact
  for (size_t i = 1; i < r.configs.size(); ++i)
    EXPECT_LE(r.configs[0].over_bytes, r.configs[i].over_bytes);
  const std::string text = plan_text(o, r, 3, 1);
  EXPECT_NE(text.find("nothing fits"), std::string::npos);
  EXPECT_TRUE(plan_json(o, r, 1)["recommended"].is_null());
}

TEST(PlannerRecommendation, BadHeadroom) {
  PlanOptions o = options("tiny-llama", 1, 2, 32, 2, std::nullopt);
  o.headroom = 1.0;
  try {
    plan(o);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "--headroom");
  }
}

}  // namespace
}  // namespace fullshard::planner
