// Asynchronous tensor parallelism (tensor_parallel.async) in the simulator: which collectives
// the micro-pipeline pass leaves plain and which it fuses, per step, as PyTorch issues them;
// the communication it hides; its symmetric memory; and the scenarios it refuses.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "core/model/async_tp.h"
#include "core/scenario/json_reader.h"
#include "tests/support/input_error.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

// async TP runs under torch.compile (NOTE [What async TP needs]): both programs compile.
json tiny(int shard, int tp, bool async, const std::string& ac = "none") {
  return {
      {"name", "t"},
      {"model", {{"name", "tiny-llama"}, {"implementation", {{"compile", true}}}}},
      {"training",
       {{"batch_per_rank", 2}, {"seq_len", 16}, {"steps", 2}, {"activation_checkpointing", ac}}},
      {"fsdp", {{"mesh", {{"shape", {shard, tp}}, {"dim_names", {"dp_shard", "tp"}}}}}},
      {"tensor_parallel", {{"async", async}}},
      {"hardware", {{"profile", "h100-sxm-80gb"}, {"nodes", 1}, {"gpus_per_node", shard * tp}}}};
}

struct Played {
  std::map<std::string, std::map<CollectiveKind, int>> collectives;  // tp group's, by kind
  std::map<OpKind, int> fused;                                       // collective-matmul kernels
  sim::SimulationReport report;
};

// Program 0's last step.
Played play(const json& j) {
  Played p;
  sim::SimulateOptions o;
  o.on_played = [&](const sim::PlayedRun& run) {
    const auto& prog = run.programs.front();
    const int last = prog.instrs.back().step;
    for (const auto& in : prog.instrs) {
      if (in.step != last) continue;
      if (in.type == sim::InstrType::kCollective)
        ++p.collectives[run.groups[in.group].name][in.coll];
      if (in.type == sim::InstrType::kKernel &&
          (in.op == OpKind::kAllGatherMatmul || in.op == OpKind::kMatmulReduceScatter))
        ++p.fused[in.op];
    }
  };
  p.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.report.ok()) << testing::problems_text(p.report);
  return p;
}

constexpr int L = 2;  // tiny-llama's blocks

// Per step over tp (compare TensorParallelCollectives.PerStepCountsMatchWhatPyTorchIssues):
// per block the forward's 2 all-gathers (fused with wq/wk/wv and w1/w3) and 2 reduce-scatters
// (fused with wo and w2), and the backward's 2 all-gathers of wo's and w2's output gradients
// (fused with their grad_input products) become collective-matmuls: 4L all-gather-matmuls and
// 2L matmul-reduce-scatters. The backward's 2 reduce-scatters per block stay plain (their input
// sums two or three products), as do the collectives outside the blocks.
TEST(AsyncTensorParallel, CollectivesPerStepAsThePassFusesThem) {
  const Played sync = play(tiny(2, 2, false)), async = play(tiny(2, 2, true));
  const auto& s = sync.collectives.at("tp");
  const auto& a = async.collectives.at("tp");
  EXPECT_EQ(a.at(CollectiveKind::kAllGather), s.at(CollectiveKind::kAllGather) - 4 * L);
  EXPECT_EQ(a.at(CollectiveKind::kAllGather), 2);  // output's input, tok_embeddings' backward
  EXPECT_EQ(a.at(CollectiveKind::kReduceScatter), s.at(CollectiveKind::kReduceScatter) - 2 * L);
  EXPECT_EQ(a.at(CollectiveKind::kReduceScatter), 1 + 2 * L + 1);
  EXPECT_EQ(a.at(CollectiveKind::kAllReduce), s.at(CollectiveKind::kAllReduce));
  EXPECT_EQ(async.fused.at(OpKind::kAllGatherMatmul), 4 * L);
  EXPECT_EQ(async.fused.at(OpKind::kMatmulReduceScatter), 2 * L);
  EXPECT_TRUE(sync.fused.empty());
  // FSDP's collectives do not change.
  EXPECT_EQ(async.collectives.at("shard"), sync.collectives.at("shard"));
  // Full activation checkpointing replays the blocks' forward: 2L more of each fused op.
  const Played full = play(tiny(2, 2, true, "full"));
  EXPECT_EQ(full.fused.at(OpKind::kAllGatherMatmul), 6 * L);
  EXPECT_EQ(full.fused.at(OpKind::kMatmulReduceScatter), 4 * L);
}

// Llama 3.1 70B at FSDP 32 x tp 8 on H100s: the fused ops hide most tp communication, so the
// step is shorter and less tp communication is exposed; the symmetric workspace is two
// [B x S/tp, D] bf16 chunks, taken from the allocator's capacity.
TEST(AsyncTensorParallel, HidesTensorParallelCommunication) {
  json j = json_reader::read_json_file(std::string(FULLSHARD_SOURCE_DIR) +
                                       "/scenarios/llama3.1-70b-fsdp32-tp8-h100.json");
  j["model"] = {{"name", j["model"]}, {"implementation", {{"compile", true}}}};
  const Played sync = play(j);
  j["tensor_parallel"]["async"] = true;
  const Played async = play(j);
  const size_t tp = static_cast<size_t>(MeshDimKind::kTp);
  const auto& s = sync.report.last_step;
  const auto& a = async.report.last_step;
  EXPECT_LT(async.report.step_time_s, sync.report.step_time_s);
  EXPECT_GT(a.comm_by_dim_s[tp], 0);
  EXPECT_LT(a.exposed_comm_by_dim_s[tp], 0.5 * s.exposed_comm_by_dim_s[tp]);
  EXPECT_LE(a.exposed_comm_by_dim_s[tp], a.comm_by_dim_s[tp] + 1e-12);
  EXPECT_GE(a.exposed_comm_s + 1e-12, a.exposed_comm_by_dim_s[tp]);
  const uint64_t ws = 2ull * 1 * (8192 / 8) * 8192 * 2;
  EXPECT_EQ(async.report.symmetric_memory_bytes, ws);
  EXPECT_EQ(sync.report.symmetric_memory_bytes, 0u);
  EXPECT_EQ(async.report.capacity_bytes, sync.report.capacity_bytes - ws);
  // The critical path splits the step exactly, as without async TP.
  double path = 0;
  for (double x : a.critical_path_s) path += x;
  EXPECT_NEAR(path, a.end_s - a.begin_s, 1e-9);
}

TEST(AsyncTensorParallel, WorkspaceIsTwoOutputChunks) {
  EXPECT_EQ(ops::tp::symmetric_workspace_bytes(2, 4096, 8192, 8, 2), 2u * 2 * 512 * 8192 * 2);
  EXPECT_EQ(ops::tp::symmetric_workspace_bytes(2, 4096, 8192, 1, 2), 0u);
}

// What PyTorch cannot run is refused at load, in one line naming tensor_parallel.async.
TEST(AsyncTensorParallel, RefusedWherePyTorchCannotRunIt) {
  auto error = [](const json& j) { return testing::input_error_of([&] { parse_scenario(j); }); };
  EXPECT_EQ(error(tiny(2, 2, true)), "");
  EXPECT_NE(error(tiny(4, 1, true)).find("no tp dim"), std::string::npos);
  json cpu = tiny(2, 2, true);
  cpu["hardware"] = {{"profile", "cpu"}, {"nodes", 1}, {"gpus_per_node", 4}};
  EXPECT_NE(error(cpu).find("CPU profile"), std::string::npos) << error(cpu);
  json nodes = tiny(2, 2, true);  // tp 2 over 4 nodes of 1 GPU
  nodes["hardware"]["gpus_per_node"] = 1;
  nodes["hardware"]["nodes"] = 4;
  EXPECT_NE(error(nodes).find("inside a node"), std::string::npos) << error(nodes);
  json gpt2 = tiny(2, 2, true);
  gpt2["model"] = "tiny-gpt2";  // eager: GPT-2 with compile is refused before
  json eager = tiny(2, 2, true);
  eager["model"]["implementation"]["compile"] = false;
  EXPECT_NE(error(eager).find("without model.implementation compile"), std::string::npos)
      << error(eager);
  EXPECT_NE(error(gpt2).find("biased"), std::string::npos) << error(gpt2);
  json op = tiny(2, 2, true);
  op["training"]["activation_checkpointing"] = "selective_op";
  EXPECT_NE(error(op).find("selective op"), std::string::npos) << error(op);
  for (const json& j : {tiny(4, 1, true), cpu, nodes, gpt2, eager, op}) {
    const std::string e = error(j);
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find("tensor_parallel.async"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fullshard
