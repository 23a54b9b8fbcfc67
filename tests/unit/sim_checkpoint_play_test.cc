// NOTE [Playing a checkpoint save] (simulator/checkpoint_play.h): the engine plays each save
// (device-to-host copies, the write on the checkpoint lane, sync / async waits) and what it
// plays costs what the closed form of NOTE [Checkpoint cost] says, save by save; the device
// memory predictions do not change, async staging is in the host accounts, the trace shows the
// checkpoint lane, and the planner's fast path (play_checkpoint = false) is the closed form.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "simulator/checkpoint_cost.h"
#include "simulator/checkpoint_play.h"
#include "simulator/report.h"
#include "simulator/simulate.h"
#include "simulator/trace.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {
using nlohmann::json;

// The engine sums doubles: the played times agree with the closed form to rounding.
void expect_near_rel(double played, double closed, const std::string& what) {
  EXPECT_NEAR(played, closed, 1e-9 * std::max(1.0, std::abs(closed)) + 1e-12) << what;
}

struct Played {
  sim::SimulationReport plain, with;
  sim::CheckpointCost closed;
};

// `j` without and with training.checkpoint {every, mode}; the storage bandwidth makes the
// write last `write_steps` plain steps, so that async saves wait for the previous write when
// every < write_steps and do not when every > write_steps.
Played play(json j, int every, bool async, double write_steps, sim::SimulateOptions o = {}) {
  Played p;
  p.plain = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.plain.ok()) << testing::problems_text(p.plain);
  j["training"]["checkpoint"] = {{"every", every}, {"mode", async ? "async" : "sync"}};
  uint64_t node_bytes = sim::checkpoint_cost(parse_scenario(j), 1.0).node_bytes;
  j["training"]["checkpoint"]["storage_write_bandwidth"] =
      static_cast<double>(node_bytes) / (write_steps * p.plain.step_time_s);
  const Scenario s = parse_scenario(j);
  p.with = sim::simulate_scenario(s, o);
  EXPECT_TRUE(p.with.ok()) << testing::problems_text(p.with);
  p.closed = sim::checkpoint_cost(s, p.plain.step_time_s);
  return p;
}

void expect_device_memory_unchanged(const Played& p) {
  ASSERT_EQ(p.with.classes.size() >= p.plain.classes.size(), true);
  for (const auto& c : p.with.classes) {
    // The class of the plain run holding the same representative (HSDP splits writers off).
    const sim::RankClassReport* base = nullptr;
    for (const auto& b : p.plain.classes)
      for (int r : b.ranks) base = r == c.representative ? &b : base;
    ASSERT_NE(base, nullptr);
    EXPECT_EQ(c.peak_allocated_bytes, base->peak_allocated_bytes);
    EXPECT_EQ(c.peak_reserved_bytes, base->peak_reserved_bytes);
    EXPECT_EQ(c.allocated_after_step, base->allocated_after_step);
    EXPECT_EQ(c.breakdown_at_peak, base->breakdown_at_peak);
  }
}

// FSDP on 2 ranks, every step played: each save exposes d2h + write (sync), or d2h plus what is
// left of the previous write (async), exactly as the closed form; the run's end waits for the
// last async write; the step time is training's; the whole run adds every save.
TEST(SimCheckpointPlay, EachPlayedSaveCostsTheClosedForm) {
  testing::TinyOptions t;
  t.steps = 6;
  sim::SimulateOptions o;
  o.simulated_steps = 0;  // play every step
  for (int async = 0; async < 2; ++async) {
    for (int every : {1, 2, 3}) {
      SCOPED_TRACE(std::string(async ? "async" : "sync") + " every " + std::to_string(every));
      const Played p = play(testing::tiny_scenario_json(t), every, async, 2.5, o);
      ASSERT_TRUE(p.with.checkpoint);
      const sim::CheckpointCost& c = *p.with.checkpoint;
      ASSERT_EQ(c.played.size(), static_cast<size_t>(6 / every));
      EXPECT_GT(p.closed.d2h_s, 0);
      double sum = 0;
      for (size_t k = 0; k < c.played.size(); ++k) {
        EXPECT_EQ(c.played[k].step, static_cast<int>((k + 1) * every - 1));
        // The first async save has no earlier write to wait for.
        const double closed = async && k == 0 ? p.closed.d2h_s : p.closed.exposed_s;
        expect_near_rel(c.played[k].exposed_s(), closed, "save " + std::to_string(k));
        // The write on the checkpoint lane: the node's bytes at the storage bandwidth, after
        // the copies; sync waits for its end.
        expect_near_rel(c.played[k].write_end_s - c.played[k].write_begin_s, p.closed.write_s,
                        "write");
        if (!async)
          expect_near_rel(c.played[k].end_s, c.played[k].write_end_s, "sync waits for the write");
        sum += c.played[k].exposed_s();
      }
      if (async) {
        EXPECT_GT(p.closed.exposed_s,
                  p.closed.d2h_s * (every < 2.5 ? 1.0001 : 0.0));  // every 1, 2 wait
        if (every == 3)
          expect_near_rel(p.closed.exposed_s, p.closed.d2h_s, "every 3 hides the write");
        // The last save is after the last step: nothing to hide its write behind.
        expect_near_rel(c.played_final_wait_s, p.closed.write_s, "final wait");
      } else {
        EXPECT_EQ(c.played_final_wait_s, 0);
      }
      expect_near_rel(p.with.step_time_s, p.plain.step_time_s, "step time");
      expect_near_rel(p.with.total_time_s, p.plain.total_time_s + sum + c.played_final_wait_s,
                      "whole run");
      expect_device_memory_unchanged(p);
      // Host staging: async holds one save's shards (3 fp32 copies of the rank's parameters).
      const uint64_t staging = async ? p.closed.host_staging_bytes : 0;
      for (size_t i = 0; i < p.with.classes.size(); ++i)
        EXPECT_EQ(p.with.classes[i].peak_host_bytes, p.plain.classes[i].peak_host_bytes + staging);
    }
  }
}

// LoRA on the tiny model: the played save copies the frozen bf16 base once and the adapters with
// their AdamW states, and costs what the closed form says for those bytes.
TEST(SimCheckpointPlay, LoraSavesCostTheClosedFormOfTheirBytes) {
  testing::TinyOptions t;
  t.steps = 2;
  t.mixed_precision = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}};
  json j = testing::tiny_scenario_json(t);
  j["model"] = {{"name", "tiny-llama"}};
  j["model"]["lora"] = {{"rank", 4}, {"alpha", 8}, {"target_modules", {"q_proj", "v_proj"}}};
  sim::SimulateOptions o;
  o.simulated_steps = 0;
  const Played p = play(j, 1, false, 2.5, o);
  ASSERT_TRUE(p.with.checkpoint);
  const sim::CheckpointCost& c = *p.with.checkpoint;
  ASSERT_EQ(c.played.size(), 2u);
  Scenario full = parse_scenario(testing::tiny_scenario_json(t));
  full.training.checkpoint.every = 1;
  EXPECT_LT(p.closed.shard_bytes[0], sim::checkpoint_cost(full, 1.0).shard_bytes[0] / 3);
  for (const auto& save : c.played) {
    expect_near_rel(save.exposed_s(), p.closed.exposed_s, "save");
    expect_near_rel(save.write_end_s - save.write_begin_s, p.closed.write_s, "write");
  }
}

// HSDP 2 x 2 over 2 nodes: only replica 0 (node 0) writes, its node's storage carries the whole
// checkpoint; the writers' saves cost the closed form, the other replica holds no staging.
TEST(SimCheckpointPlay, HsdpOnlyTheFirstReplicaWrites) {
  testing::TinyOptions t;
  t.mesh = {2, 2};
  t.steps = 4;
  t.hardware_extra = {{"profile", "h100-sxm-80gb"}, {"nodes", 2}, {"gpus_per_node", 2}};
  sim::SimulateOptions o;
  o.simulated_steps = 0;
  for (int async = 0; async < 2; ++async) {
    SCOPED_TRACE(async ? "async" : "sync");
    const Played p = play(testing::tiny_scenario_json(t), 2, async, 1.5, o);
    ASSERT_TRUE(p.with.checkpoint);
    const sim::CheckpointCost& c = *p.with.checkpoint;
    ASSERT_EQ(c.played.size(), 2u);
    EXPECT_EQ(p.closed.node_bytes, p.closed.shard_bytes[0] + p.closed.shard_bytes[1]);
    EXPECT_EQ(p.closed.shard_bytes[2], 0u);
    expect_near_rel(c.played[0].exposed_s(), async ? p.closed.d2h_s : p.closed.exposed_s,
                    "first save");
    expect_near_rel(c.played[1].exposed_s(), p.closed.exposed_s, "second save");
    expect_device_memory_unchanged(p);
    for (const auto& cls : p.with.classes) {
      const bool writer = sim::writes_checkpoint(parse_scenario(testing::tiny_scenario_json(t)),
                                                 cls.representative);
      EXPECT_EQ(writer, cls.representative < 2);
      if (!writer || !async) {
        EXPECT_EQ(cls.peak_host_bytes, 0u) << cls.representative;
      } else {
        EXPECT_EQ(cls.peak_host_bytes,
                  p.closed.shard_bytes[static_cast<size_t>(cls.representative)]);
      }
    }
  }
}

// scenarios/tiny-deepseek-bias-cpu2.json (the expert bias, one MoE layer of 4 experts): rank 0
// also copies the persistent buffer, whole (NOTE [Persistent buffers in checkpoints] in
// core/checkpoint/checkpoint_metadata.h), so it is a class of its own; 16 bytes more than its
// shard peer's save, each class's save costs the closed form of its bytes, and async staging is
// each writer's own bytes.
TEST(SimCheckpointPlay, RankZeroAlsoCopiesThePersistentBuffers) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/tiny-deepseek-bias-cpu2.json");
  json j = json::parse(in);
  j["training"]["steps"] = 2;
  json without = j;
  without["model"]["moe"].erase("load_balance");
  without["model"]["moe"].erase("load_balance_coeff");
  without["training"]["checkpoint"] = {{"every", 1}};
  const std::vector<uint64_t> plain = sim::checkpoint_shard_bytes(parse_scenario(without));
  sim::SimulateOptions o;
  o.simulated_steps = 0;
  for (int async = 0; async < 2; ++async) {
    SCOPED_TRACE(async ? "async" : "sync");
    const Played p = play(j, 1, async, 2.5, o);
    ASSERT_TRUE(p.with.checkpoint);
    EXPECT_EQ(p.closed.shard_bytes[0], plain[0] + 4 * 4);  // E x fp32
    EXPECT_EQ(p.closed.shard_bytes[1], plain[1]);
    ASSERT_EQ(p.with.classes.size(), 2u);
    EXPECT_EQ(p.with.classes[0].ranks, std::vector<int>{0});
    const sim::CheckpointCost& c = *p.with.checkpoint;
    ASSERT_EQ(c.played.size(), 2u);
    expect_near_rel(c.played[1].exposed_s(), p.closed.exposed_s, "second save");
    expect_device_memory_unchanged(p);
    for (const auto& cls : p.with.classes) {
      const sim::RankClassReport* base = nullptr;
      for (const auto& b : p.plain.classes)
        for (int r : b.ranks) base = r == cls.representative ? &b : base;
      ASSERT_NE(base, nullptr);
      EXPECT_EQ(cls.peak_host_bytes,
                base->peak_host_bytes +
                    (async ? p.closed.shard_bytes[static_cast<size_t>(cls.representative)] : 0))
          << cls.representative;
    }
  }
}

// Steps extrapolated (a save every 40 of 100 steps, 3 played): one save is played after the
// last played step, standing for the run's 2; the whole run adds the other at the closed form.
// The planner's path (play_checkpoint = false) plays none and prices them by the closed form.
TEST(SimCheckpointPlay, ExtrapolatedRunsPlayOneSaveAndPriceTheRest) {
  testing::TinyOptions t;
  t.steps = 100;
  const Played p = play(testing::tiny_scenario_json(t), 40, false, 2.0);
  ASSERT_LT(p.with.simulated_steps, 40);
  ASSERT_TRUE(p.with.checkpoint);
  const sim::CheckpointCost& c = *p.with.checkpoint;
  ASSERT_EQ(c.played.size(), 1u);
  EXPECT_EQ(c.played[0].step, p.with.simulated_steps - 1);
  EXPECT_EQ(c.saves, 2);
  expect_near_rel(c.played[0].exposed_s(), p.closed.exposed_s, "played save");
  expect_near_rel(p.with.total_time_s, p.plain.total_time_s + 2 * p.closed.exposed_s, "whole run");
  expect_device_memory_unchanged(p);

  json j = testing::tiny_scenario_json(t);
  j["training"]["checkpoint"] = {{"every", 40}};
  sim::SimulateOptions fast;
  fast.play_checkpoint = false;
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j), fast);
  ASSERT_TRUE(r.checkpoint);
  EXPECT_TRUE(r.checkpoint->played.empty());
  EXPECT_EQ(r.total_time_s, p.plain.total_time_s);
  EXPECT_EQ(r.step_time_with_checkpoint_s(), r.step_time_s + r.checkpoint->amortised_s_per_step);
}

// The Chrome trace has a "checkpoint" lane with each played write, the host's save spans, and
// the device-to-host copies on their stream; the text report names the played saves.
TEST(SimCheckpointPlay, TraceAndReportShowThePlayedSaves) {
  testing::TinyOptions t;
  t.steps = 4;
  json j = testing::tiny_scenario_json(t);
  j["training"]["checkpoint"] = {{"every", 2}, {"mode", "async"}, {"storage_write_bandwidth", 1e8}};
  std::ostringstream trace;
  sim::SimulateOptions o;
  o.simulated_steps = 0;
  o.on_played = [&](const sim::PlayedRun& run) { sim::write_chrome_trace(run, trace); };
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j), o);
  ASSERT_TRUE(r.ok()) << testing::problems_text(r);
  const json tr = json::parse(trace.str());
  int writes = 0, spans = 0, copies = 0;
  bool lane = false;
  for (const auto& e : tr.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" &&
        e.at("args").at("name") == "checkpoint")
      lane = true;
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "checkpoint write") {
      ++writes;
      EXPECT_EQ(e.at("tid"), 1000);
      EXPECT_NEAR(e.at("dur").get<double>(), 1e6 * r.checkpoint->write_s, 1e-3);
    }
    if (e.at("name") == "checkpoint save") ++spans;
    if (e.at("name").get<std::string>().rfind("checkpoint d2h ", 0) == 0) ++copies;
  }
  EXPECT_TRUE(lane);
  EXPECT_EQ(writes, 2 * static_cast<int>(r.classes.size()));
  EXPECT_EQ(spans, writes);
  EXPECT_GT(copies, 0);
  const std::string text = sim::report_summary(r);
  EXPECT_NE(text.find("played: 2 save(s) after step 1, 3"), std::string::npos) << text;
  const json out = sim::report_json(r);
  EXPECT_EQ(out.at("checkpoint").at("played").size(), 2u);
}

}  // namespace
}  // namespace fullshard
