// Context parallelism in the simulator: a cp dim of size 1 changes no number of a scenario; ring
// attention's rounds do the dense attention's work split evenly; its K / V exchange is one
// all-gather (allgather) or cp - 1 permutes (alltoall) per attention forward, and the backward
// rotates dK / dV cp times; the ranks' memory is predicted alike by class and rank by rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/common/json_file.h"
#include "simulator/report.h"
#include "tests/support/sim_support.h"

using namespace fullshard;
using namespace fullshard::testing;
using nlohmann::json;

namespace {

json cp_json(int shard, int cp, const std::string& rotate, const json& ac = "none") {
  return {
      {"name", "cp"},
      {"model", "tiny-llama"},
      {"training",
       {{"batch_per_rank", 2}, {"seq_len", 64}, {"steps", 2}, {"activation_checkpointing", ac}}},
      {"fsdp",
       {{"mesh", {{"shape", {shard, cp}}, {"dim_names", {"dp_shard", "cp"}}}},
        {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}}},
      {"context_parallel", {{"rotate_method", rotate}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", shard * cp}}}};
}

struct Played {
  sim::SimulationReport report;
  // Per rank (all ranks played): the last step's collectives on the cp group by kind, and its
  // attention FLOPs (forward kinds).
  std::vector<std::map<CollectiveKind, int>> cp_collectives;
  std::vector<double> attention_flops;
};

Played play(const Scenario& s) {
  Played p;
  sim::SimulateOptions o;
  o.all_ranks = true;
  o.on_played = [&](const sim::PlayedRun& run) {
    p.cp_collectives.resize(run.programs.size());
    p.attention_flops.resize(run.programs.size());
    for (size_t i = 0; i < run.programs.size(); ++i) {
      const sim::Program& prog = run.programs[i];
      const int last = prog.instrs.back().step;
      for (const auto& in : prog.instrs) {
        if (in.step != last) continue;
        if (in.type == sim::InstrType::kCollective && run.groups[in.group].name == "cp")
          ++p.cp_collectives[i][in.coll];
        if (in.type == sim::InstrType::kKernel && in.op == OpKind::kAttention)
          p.attention_flops[i] += in.flops;
      }
    }
  };
  p.report = sim::simulate_scenario(s, o);
  return p;
}

}  // namespace

// A cp dim of size 1 is no context parallelism: the report of every scenario below is the same
// number for number (the JSON, with the scenario's mesh in it, aside).
TEST(SimContextParallel, CpOfOneChangesNothing) {
  const std::string dir = std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/";
  for (const char* name : {"tiny-llama-h100", "tiny-llama-tp2-h100-4on1", "llama3.1-8b-fsdp8-h100",
                           "llama3.1-70b-hsdp8x128-h100"}) {
    json j = read_json_input(dir + name + ".json", "scenario");
    Scenario plain = parse_scenario(j, dir);
    json& mesh = j["fsdp"]["mesh"];
    std::vector<std::string> names = plain.fsdp.mesh_dim_names;
    std::vector<int> shape = plain.fsdp.mesh_shape;
    const auto at = std::find(names.begin(), names.end(), "shard") - names.begin() + 1;
    names.insert(names.begin() + at, "cp");
    shape.insert(shape.begin() + at, 1);
    mesh = {{"shape", shape}, {"dim_names", names}};
    const Scenario with = parse_scenario(j, dir);
    ASSERT_EQ(with.fsdp.mesh_size("cp"), 1);
    const sim::SimulationReport a = sim::simulate_scenario(plain), b = sim::simulate_scenario(with);
    json ja = sim::report_json(a), jb = sim::report_json(b);
    EXPECT_EQ(ja.dump(), jb.dump()) << name;
  }
}

TEST(SimContextParallel, RingRoundsSplitTheDenseAttentionEvenly) {
  // Dense: one rank holds whole sequences (cp 1, shard 1); ring: 4 cp ranks share them.
  json dense = cp_json(1, 1, "allgather");
  dense.erase("context_parallel");
  dense["fsdp"]["mesh"] = {{"shape", {1}}};
  const Played d = play(parse_scenario(dense));
  ASSERT_TRUE(d.report.ok()) << problems_text(d.report);
  for (const char* rotate : {"allgather", "alltoall"}) {
    const Played r = play(parse_scenario(cp_json(1, 4, rotate)));
    ASSERT_TRUE(r.report.ok()) << problems_text(r.report);
    double total = 0;
    for (double f : r.attention_flops) {
      EXPECT_DOUBLE_EQ(f, r.attention_flops.front()) << "balanced work";
      total += f;
    }
    EXPECT_DOUBLE_EQ(total, d.attention_flops.front()) << rotate;
  }
}

TEST(SimContextParallel, KvExchangePerRotateMethod) {
  // tiny-llama: 2 blocks, no recomputation; cp 4.
  const Played ag = play(parse_scenario(cp_json(1, 4, "allgather")));
  const Played a2a = play(parse_scenario(cp_json(1, 4, "alltoall")));
  ASSERT_TRUE(ag.report.ok()) << problems_text(ag.report);
  ASSERT_TRUE(a2a.report.ok()) << problems_text(a2a.report);
  for (int r = 0; r < 4; ++r) {
    // allgather: one all-gather of K / V per block forward and one per block backward; the
    // backward's dK / dV rotate 4 times per block (PyTorch's dkv rotater is always all-to-all).
    EXPECT_EQ(ag.cp_collectives[r].at(CollectiveKind::kAllGather), 2 * 2) << r;
    EXPECT_EQ(ag.cp_collectives[r].at(CollectiveKind::kAllToAll), 2 * 4) << r;
    // alltoall: 3 K / V permutes forward and 3 backward per block, plus the 4 dK / dV ones.
    EXPECT_EQ(a2a.cp_collectives[r].count(CollectiveKind::kAllGather), 0u) << r;
    EXPECT_EQ(a2a.cp_collectives[r].at(CollectiveKind::kAllToAll), 2 * (3 + 3 + 4)) << r;
  }
  // Both report the cp dim's communication, and recomputing blocks repeats the forward's.
  EXPECT_GT(ag.report.last_step.comm_by_dim_s[static_cast<size_t>(MeshDimKind::kCp)], 0);
  const Played full = play(parse_scenario(cp_json(1, 4, "allgather", "full")));
  ASSERT_TRUE(full.report.ok()) << problems_text(full.report);
  EXPECT_EQ(full.cp_collectives[0].at(CollectiveKind::kAllGather), 2 * 3);
}

TEST(SimContextParallel, ClassesPredictEveryRanksMemory) {
  // FSDP over dp_shard 2 x cp 2; every rank recorded vs one per class.
  for (const char* rotate : {"allgather", "alltoall"}) {
    const Scenario s = parse_scenario(cp_json(2, 2, rotate));
    const sim::SimulationReport by_class = sim::simulate_scenario(s);
    const Played all = play(s);
    ASSERT_TRUE(by_class.ok()) << problems_text(by_class);
    ASSERT_TRUE(all.report.ok()) << problems_text(all.report);
    for (const auto& c : by_class.classes)
      for (int rk : c.ranks) {
        EXPECT_EQ(all.report.classes[rk].peak_allocated_bytes, c.peak_allocated_bytes);
        EXPECT_EQ(all.report.classes[rk].peak_reserved_bytes, c.peak_reserved_bytes);
      }
    // Ranks differ by their cp index (their rounds), not by their dp_shard index.
    EXPECT_EQ(by_class.classes.size(), 2u) << rotate;
  }
}

TEST(SimContextParallel, LongContextPeakFallsWithCp) {
  // Llama 3.1 8B at 32K tokens a sequence on 8 GPUs: each doubling of cp halves the activations
  // of every rank's tokens.
  uint64_t last = UINT64_MAX;
  for (int cp : {2, 4, 8}) {
    json j = read_json_input(
        std::string(FULLSHARD_SOURCE_DIR) + "/scenarios/llama3.1-8b-cp8-h100.json", "scenario");
    j["training"]["seq_len"] = 32768;
    j["fsdp"]["mesh"] = {{"shape", {8 / cp, cp}}, {"dim_names", {"dp_shard", "cp"}}};
    const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j));
    ASSERT_TRUE(r.ok()) << problems_text(r);
    uint64_t peak = 0;
    for (const auto& c : r.classes) peak = std::max(peak, c.peak_allocated_bytes);
    EXPECT_LT(peak, last) << "cp " << cp;
    last = peak;
  }
}
