// NOTE [Checkpoint cost] (simulator/checkpoint_cost.h): the checkpoint time equals the closed
// form from the shard bytes and the bandwidths, computed here from the parameter count; an
// async save exposes less than a sync one; the device predictions do not change; HSDP writes
// every row once; training.checkpoint's fields are checked as other fields are.
#include <gtest/gtest.h>

#include "core/common/error.h"
#include "core/model/model_config.h"
#include "core/train/training_program.h"
#include "simulator/checkpoint_cost.h"
#include "simulator/report.h"
#include "simulator/simulate.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {
using nlohmann::json;
using testing::input_error_of;

Scenario example(const std::string& name) {
  return load_scenario_file(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/" + name + ".json");
}

// Llama 3.1 8B on 8 H100s: every parameter's first dimension divides by 8, so each rank holds
// exactly 1/8 of the 3 fp32 copies (parameter, exp_avg, exp_avg_sq) of every parameter.
TEST(SimCheckpointCost, EqualsTheClosedFormFromShardBytesAndBandwidths) {
  Scenario s = example("llama3.1-8b-fsdp8-h100");
  ASSERT_EQ(s.world_size(), 8);
  const double params = static_cast<double>(parameter_count(s.model));
  const double per_rank = 12 * params / 8;
  const double d2h_bw = s.hardware.device.pageable_copy_bandwidth;
  ASSERT_GT(d2h_bw, 0);
  s.training.checkpoint.every = 100;
  s.training.checkpoint.storage_write_bandwidth = 3e9;
  s.training.steps = 1000;
  const double step = 1.25;
  const sim::CheckpointCost sync = sim::checkpoint_cost(s, step);
  for (uint64_t b : sync.shard_bytes) EXPECT_EQ(static_cast<double>(b), per_rank);
  // The embedding is copied first and takes longer than launching every later copy: the chain
  // is bandwidth-bound, one launch then every byte at the pageable bandwidth.
  const double launch = s.hardware.device.eager_dispatch_s + s.hardware.device.launch_overhead_s;
  EXPECT_GT(launch, 0);
  EXPECT_EQ(sync.launch_s, launch);
  const double d2h = launch + per_rank / d2h_bw;
  EXPECT_NEAR(sync.d2h_s, d2h, 1e-12 * d2h);
  EXPECT_DOUBLE_EQ(sync.write_s, 8 * per_rank / 3e9);  // one node: its 8 ranks share the storage
  EXPECT_NEAR(sync.exposed_s, d2h + 8 * per_rank / 3e9, 1e-12);
  EXPECT_DOUBLE_EQ(sync.amortised_s_per_step, sync.exposed_s / 100);
  EXPECT_EQ(sync.saves, 10);
  EXPECT_EQ(sync.host_staging_bytes, 0u);
  // Async: only the staging is exposed while the write fits in the next 100 steps...
  s.training.checkpoint.mode = CheckpointSaveMode::kAsync;
  const sim::CheckpointCost async = sim::checkpoint_cost(s, step);
  EXPECT_DOUBLE_EQ(async.exposed_s, sync.d2h_s);
  EXPECT_DOUBLE_EQ(async.hidden_s, 8 * per_rank / 3e9);
  EXPECT_EQ(static_cast<double>(async.host_staging_bytes), per_rank);
  EXPECT_LT(async.exposed_s, sync.exposed_s);
  // ... and the next save waits for what is left of the write when it does not.
  s.training.checkpoint.every = 2;
  const sim::CheckpointCost late = sim::checkpoint_cost(s, step);
  EXPECT_NEAR(late.exposed_s, d2h + (8 * per_rank / 3e9 - 2 * step), 1e-12);
  EXPECT_DOUBLE_EQ(late.hidden_s, 2 * step);
  EXPECT_DOUBLE_EQ(late.amortised_s_per_step, late.exposed_s / 2);
}

// LoRA on Llama 3.1 8B over 8 ranks: the frozen base is saved once, in bf16 (frozen_dtype's
// default under LoRA), with no AdamW state; only the adapters save three fp32 copies. Every
// parameter's first dimension divides by 8, so each rank holds exactly 1/8 of each.
TEST(SimCheckpointCost, FrozenParametersSaveNoOptimizerStateInTheirOwnDtype) {
  Scenario s = example("llama3.1-8b-lora-fsdp8-h100");
  ASSERT_EQ(s.world_size(), 8);
  ASSERT_TRUE(s.model.lora.enabled());
  const ParameterCounts n = count_parameters(s);
  ASSERT_GT(n.trainable, 0);
  ASSERT_LT(n.trainable, n.total);
  const uint64_t per_rank =
      static_cast<uint64_t>((2 * (n.total - n.trainable) + 12 * n.trainable) / 8);
  s.training.checkpoint.every = 100;
  const sim::CheckpointCost c = sim::checkpoint_cost(s, 1.0);
  for (uint64_t b : c.shard_bytes) EXPECT_EQ(b, per_rank);
  // A bf16 original dtype halves every copy of a full fine-tune.
  Scenario full = example("llama3.1-8b-fsdp8-h100");
  full.training.checkpoint.every = 100;
  const uint64_t fp32 = sim::checkpoint_cost(full, 1.0).shard_bytes[0];
  full.training.orig_dtype = DType::kBFloat16;
  EXPECT_EQ(sim::checkpoint_cost(full, 1.0).shard_bytes[0] * 2, fp32);
}

// HSDP 2 x 4 over two nodes of 4: only replica 0 (node 0) writes, each row once, and node 0's
// storage carries the whole checkpoint. Uneven shards (the tiny model's dims do not divide by 4).
TEST(SimCheckpointCost, HsdpWritesEveryRowOnceFromTheFirstReplica) {
  testing::TinyOptions o;
  o.mesh = {2, 4};
  json j = testing::tiny_scenario_json(o);
  j["hardware"]["gpus_per_node"] = 4;
  j["hardware"]["nodes"] = 2;
  j["model"] = {{"arch", "llama"}, {"name", "t"},   {"vocab_size", 250},
                {"dim", 24},       {"n_layers", 2}, {"n_heads", 2},
                {"n_kv_heads", 1}, {"ffn_dim", 38}, {"max_seq_len", 64}};
  j["training"]["checkpoint"] = {{"every", 5}, {"storage_write_bandwidth", 1e6}};
  const Scenario s = parse_scenario(j);
  const auto bytes = sim::checkpoint_shard_bytes(s);
  uint64_t total = 0;
  for (int r = 0; r < 8; ++r) {
    if (r >= 4) {
      EXPECT_EQ(bytes[static_cast<size_t>(r)], 0u) << r;
    }
    total += bytes[static_cast<size_t>(r)];
  }
  EXPECT_EQ(total, 12u * static_cast<uint64_t>(parameter_count(s.model)));
  EXPECT_NE(bytes[0], bytes[3]);  // 250 rows over 4 ranks: 63, 63, 63, 61
  const sim::CheckpointCost c = sim::checkpoint_cost(s, 0.1);
  EXPECT_EQ(c.node_bytes, total);
  EXPECT_DOUBLE_EQ(c.write_s, static_cast<double>(total) / 1e6);
}

// DeepSeek-V3 16B on 8 H100s (ep 8): rank 0 alone also writes every MoE layer's expert_bias
// whole (NOTE [Persistent buffers in checkpoints] in core/checkpoint/checkpoint_metadata.h):
// 26 MoE layers x 64 experts x 4 bytes = 6,656 bytes more than without the bias; the other
// ranks' bytes do not move, and the slowest copy chain takes that much longer at the bandwidth.
TEST(SimCheckpointCost, RankZeroAlsoWritesThePersistentBuffers) {
  Scenario s = example("deepseek-v3-16b-ep8-h100");
  ASSERT_EQ(s.model.moe.load_balance, MoeLoadBalance::kExpertBias);
  s.training.checkpoint.every = 100;
  Scenario plain = s;
  plain.model.moe.load_balance = MoeLoadBalance::kNone;
  const sim::CheckpointCost with = sim::checkpoint_cost(s, 1.0),
                            without = sim::checkpoint_cost(plain, 1.0);
  ASSERT_EQ(with.shard_bytes.size(), without.shard_bytes.size());
  EXPECT_EQ(with.shard_bytes[0], without.shard_bytes[0] + 26 * 64 * 4);
  for (size_t r = 1; r < with.shard_bytes.size(); ++r)
    EXPECT_EQ(with.shard_bytes[r], without.shard_bytes[r]) << r;
  EXPECT_EQ(with.node_bytes, without.node_bytes + 26 * 64 * 4);
  EXPECT_NEAR(with.d2h_s, without.d2h_s + 26 * 64 * 4 / with.d2h_bandwidth, 1e-12);
}

// The planner's path (saves not played, tests/unit/sim_checkpoint_play_test.cc plays them):
// a simulation with training.checkpoint predicts the same memory and step time, and adds the
// amortised save to the step time with checkpoints.
TEST(SimCheckpointCost, SimulationAddsTheCostAndLeavesDevicePredictionsUnchanged) {
  json j = testing::tiny_scenario_json({});
  const sim::SimulationReport plain = sim::simulate_scenario(parse_scenario(j));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain.checkpoint);
  double exposed[2] = {};
  for (int async = 0; async < 2; ++async) {
    j["training"]["checkpoint"] = {
        {"every", 2}, {"mode", async ? "async" : "sync"}, {"storage_write_bandwidth", 1e7}};
    const Scenario s = parse_scenario(j);
    sim::SimulateOptions fast;
    fast.play_checkpoint = false;
    const sim::SimulationReport r = sim::simulate_scenario(s, fast);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r.checkpoint);
    ASSERT_EQ(r.classes.size(), plain.classes.size());
    for (size_t i = 0; i < r.classes.size(); ++i) {
      EXPECT_EQ(r.classes[i].peak_allocated_bytes, plain.classes[i].peak_allocated_bytes);
      EXPECT_EQ(r.classes[i].peak_reserved_bytes, plain.classes[i].peak_reserved_bytes);
      EXPECT_EQ(r.classes[i].peak_host_bytes, plain.classes[i].peak_host_bytes);
    }
    EXPECT_EQ(r.step_time_s, plain.step_time_s);
    const sim::CheckpointCost expect = sim::checkpoint_cost(s, plain.step_time_s);
    EXPECT_EQ(r.checkpoint->exposed_s, expect.exposed_s);
    EXPECT_DOUBLE_EQ(r.step_time_with_checkpoint_s(), plain.step_time_s + expect.exposed_s / 2);
    exposed[async] = r.checkpoint->exposed_s;
    const json out = sim::report_json(r);
    EXPECT_EQ(out.at("checkpoint").at("mode"), async ? "async" : "sync");
  }
  EXPECT_LT(exposed[1], exposed[0]);
}

TEST(SimCheckpointCost, BadFieldsNameThePath) {
  auto error_for = [](const json& ck) {
    json j = testing::tiny_scenario_json({});
    j["training"]["checkpoint"] = ck;
    return input_error_of([&] { parse_scenario(j); });
  };
  EXPECT_NE(error_for({{"every", 0}}).find("training.checkpoint.every: "), std::string::npos);
  EXPECT_NE(error_for({{"mode", "async"}}).find("training.checkpoint.every: is missing"),
            std::string::npos);
  EXPECT_NE(error_for({{"every", 2}, {"mode", "later"}}).find("training.checkpoint.mode: "),
            std::string::npos);
  EXPECT_NE(error_for({{"every", 2}, {"storage_write_bandwidth", 0}})
                .find("training.checkpoint.storage_write_bandwidth: "),
            std::string::npos);
  EXPECT_NE(error_for({{"every", 2}, {"keep", 3}}).find("keep"), std::string::npos);
  EXPECT_NE(error_for(5).find("training.checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace fullshard
