// The scenario time model end to end (docs/cost-model.md): overlap closed forms, symmetric vs
// per-rank simulation, stragglers, and ranking sanity between sharding choices.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "simulator/report.h"
#include "tests/support/sim_support.h"

namespace fullshard {
namespace {

using nlohmann::json;

// tiny-llama on H100 nodes; `hw` overrides profile figures.
json scenario(int nodes, int gpus_per_node, const json& hw, const json& mesh = nullptr,
              json raf = nullptr, const std::string& model = "tiny-llama", int seq = 64) {
  json j = {{"name", "t"},
            {"model", model},
            {"training", {{"batch_per_rank", 2}, {"seq_len", seq}, {"steps", 2}}},
            {"fsdp", {{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}}},
            {"hardware",
             {{"profile", "h100-sxm-80gb"}, {"nodes", nodes}, {"gpus_per_node", gpus_per_node}}}};
  for (auto& [k, v] : hw.items()) j["hardware"][k] = v;
  if (!mesh.is_null()) j["fsdp"]["mesh"] = {{"shape", mesh}};
  if (!raf.is_null()) j["fsdp"]["reshard_after_forward"] = raf;
  return j;
}

struct Played {
  sim::SimulationReport report;
  std::vector<sim::Program> programs;
  std::vector<sim::GroupInfo> groups;
  std::vector<sim::RankTiming> timing;
  double launch_s = 0;
  std::vector<double> durations;  // per instruction of program 0: the cost model's seconds
};

Played play(const json& j, bool all_ranks = false) {
  Played p;
  sim::SimulateOptions o;
  o.all_ranks = all_ranks;
  o.on_played = [&](const sim::PlayedRun& run) {
    p.programs = run.programs;
    p.groups = run.groups;
    p.timing = run.result.ranks;
    p.launch_s = run.cost.launch_overhead_seconds();
    for (const auto& in : run.programs.front().instrs)
      p.durations.push_back(in.type == sim::InstrType::kCollective
                                ? run.cost.collective_seconds(in, run.groups[in.group])
                                : 0.0);
  };
  p.report = sim::simulate_scenario(parse_scenario(j), o);
  EXPECT_TRUE(p.report.ok()) << testing::problems_text(p.report);
  return p;
}

// Instructions of program 0 in the last step that are collectives of `kind` on `stream`.
std::vector<size_t> collectives(const Played& p, CollectiveKind kind, StreamRole stream) {
  std::vector<size_t> out;
  const auto& prog = p.programs.front();
  const int last = prog.instrs.back().step;
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const auto& in = prog.instrs[i];
    if (in.type == sim::InstrType::kCollective && in.coll == kind && in.stream == stream &&
        in.step == last)
      out.push_back(i);
  }
  return out;
}

TEST(TimeModel,
     ComputeBoundExposesOnlyTheFirstAllGatherTheLastReduceScatterAndComputeStreamCollectives) {
  // Compute a million times slower than the links: every collective but the first all-gather
  // (nothing to hide behind at the start of the step) and the last reduce-scatter (nothing
  // after it but the optimizer, which waits for it) runs behind compute.
  const json hw = {{"peak_flops_bf16", 1e7},
                   {"peak_flops_fp16", 1e7},
                   {"peak_flops_fp32", 1e7},
                   {"hbm_bandwidth", 1e7},
                   {"overlap_slowdown_nvlink", 0}};
  const Played p = play(scenario(1, 8, hw));
  const auto ag = collectives(p, CollectiveKind::kAllGather, StreamRole::kAllGather);
  const auto rs = collectives(p, CollectiveKind::kReduceScatter, StreamRole::kReduceScatter);
  ASSERT_FALSE(ag.empty());
  ASSERT_FALSE(rs.empty());
  const double first_ag = p.durations[ag.front()], last_rs = p.durations[rs.back()];
  // Each runs alone on its link: the played duration is the cost model's.
  EXPECT_NEAR(p.timing[0].times[ag.front()].end - p.timing[0].times[ag.front()].start, first_ag,
              1e-9 * first_ag);
  // Plus the collectives on the compute stream (clipping's all-reduce): nothing hides them
  // (NOTE [Compute or communication] in simulator/engine/program.h).
  double on_compute = 0;
  for (size_t i : collectives(p, CollectiveKind::kAllReduce, StreamRole::kDefault))
    on_compute += p.durations[i];
  ASSERT_GT(on_compute, 0);
  const double exposed = first_ag + last_rs + on_compute;
  EXPECT_NEAR(p.report.last_step.exposed_comm_s, exposed, 1e-12 + 1e-9 * exposed);
  EXPECT_GT(p.report.last_step.compute_s, 1e4 * p.report.last_step.exposed_comm_s);
  // The critical path runs through compute, those two collectives, and the clip-grad
  // all-reduce on the compute stream.
  const auto& path = p.report.last_step.critical_path_s;
  double total = 0;
  for (double v : path) total += v;
  EXPECT_NEAR(total, p.report.step_time_s, 1e-9 * p.report.step_time_s);
  EXPECT_GT(path[static_cast<size_t>(sim::PathKind::kCompute)], 0.99 * p.report.step_time_s);
}

TEST(TimeModel, FiguresAtTheirBoundsGiveFiniteTimes) {
  // NOTE [Figure bounds] (core/scenario/hardware_profile.cc): every figure at its slowest
  // accepted value, on a straggler, over two nodes, with CPU offload and a checkpoint save, still
  // plays to a finite step time (before the bounds, one such figure made a kernel's time
  // infinite: an internal error, or a report whose step time was null).
  json hw = {{"profile", "h100-sxm-80gb"},
             {"nodes", 2},
             {"gpus_per_node", 2},
             {"rank_speed", {{{"rank", 1}, {"speed", kMinFigureFraction}}}},
             {"matmul_small_dim", 65536},
             {"sustained_clock_ratio", kMinFigureFraction},
             {"norm_memory_efficiency", kMinFigureFraction},
             {"nvls_efficiency", kMinFigureFraction}};
  for (const char* rate :
       {"peak_flops_bf16", "peak_flops_fp16", "peak_flops_fp32", "peak_flops_tf32", "hbm_bandwidth",
        "nvlink_bandwidth", "intra_node_bus_bandwidth", "network_bandwidth",
        "network_bus_bandwidth", "pcie_bandwidth", "pinned_copy_bandwidth",
        "pageable_copy_bandwidth", "host_core_flops", "host_core_memory_bandwidth",
        "host_memory_bandwidth"})
    hw[rate] = kMinFigureRate;
  for (const char* seconds : {"launch_overhead_s", "eager_dispatch_s", "kernel_gap_s",
                              "fsdp_hook_s", "fsdp_hook_param_s"})
    hw[seconds] = 1;
  for (const char* table :
       {"matmul_efficiency", "attention_efficiency", "attention_backward_efficiency",
        "attention_head_dim_efficiency", "vector_efficiency", "memory_efficiency"})
    hw[table] = {{0, kMinFigureFraction}};
  json j = scenario(2, 2, nullptr);
  j["hardware"] = hw;
  j["fsdp"]["cpu_offload"] = true;
  j["training"]["checkpoint"] = {{"every", 1}, {"storage_write_bandwidth", kMinFigureRate}};
  const sim::SimulationReport r = sim::simulate_scenario(parse_scenario(j));
  EXPECT_TRUE(std::isfinite(r.step_time_s)) << r.step_time_s;
  EXPECT_GT(r.step_time_s, 1e6);  // every figure at its slowest: far from free
  EXPECT_TRUE(std::isfinite(r.total_time_s)) << r.total_time_s;
  EXPECT_TRUE(std::isfinite(r.step_time_with_checkpoint_s())) << r.step_time_with_checkpoint_s();
}

TEST(TimeModel, CommunicationBoundStepIsTheSumOfCollectives) {
  // Compute and launches free, a slow network between 2 nodes: the step is communication, and
  // collectives running at once share the link, so the step approaches the sum of their costs.
  const json hw = {
      {"peak_flops_bf16", 1e20},      {"peak_flops_fp16", 1e20}, {"peak_flops_fp32", 1e20},
      {"hbm_bandwidth", 1e20},        {"launch_overhead_s", 0},  {"kernel_gap_s", 0},
      {"eager_dispatch_s", 0},        {"fsdp_hook_s", 0},        {"fsdp_hook_param_s", 0},
      {"network_bus_bandwidth", 1e6}, {"network_bandwidth", 1e6}};
  const Played p = play(scenario(2, 1, hw));
  double total = 0;
  const auto& prog = p.programs.front();
  const int last = prog.instrs.back().step;
  for (size_t i = 0; i < prog.instrs.size(); ++i)
    if (prog.instrs[i].type == sim::InstrType::kCollective && prog.instrs[i].step == last)
      total += p.durations[i];
  ASSERT_GT(total, 0);
  EXPECT_NEAR(p.report.step_time_s, total, 0.01 * total);
  EXPECT_LE(p.report.step_time_s, total * (1 + 1e-9));
  EXPECT_GT(p.report.last_step.critical_path_s[static_cast<size_t>(sim::PathKind::kCommunication)],
            0.99 * p.report.step_time_s);
}

TEST(TimeModel, SymmetricAndPerRankReportsAreIdentical) {
  for (const json& j : {scenario(1, 8, json::object()), scenario(2, 4, json::object()),
                        scenario(2, 4, json::object(), json::array({2, 4}))}) {
    const Played sym = play(j), all = play(j, true);
    EXPECT_FALSE(sym.report.simulated_all_ranks);
    EXPECT_TRUE(all.report.simulated_all_ranks);
    EXPECT_EQ(sym.report.step_time_s, all.report.step_time_s);
    EXPECT_EQ(sym.report.exposed_comm_s, all.report.exposed_comm_s);
    EXPECT_EQ(sym.report.compute_s, all.report.compute_s);
    EXPECT_EQ(sym.report.comm_s, all.report.comm_s);
    EXPECT_EQ(sym.report.tokens_per_s_per_gpu, all.report.tokens_per_s_per_gpu);
    EXPECT_EQ(sym.report.mfu, all.report.mfu);
    EXPECT_EQ(sym.report.last_step.critical_path_s, all.report.last_step.critical_path_s);
    EXPECT_EQ(sym.report.last_step.stream_busy_s, all.report.last_step.stream_busy_s);
    EXPECT_EQ(sym.timing[0].times, all.timing[0].times);
  }
}

TEST(TimeModel, SlowedRankDelaysEveryone) {
  // Compute-bound, no overlap slowdown: rank 3 at half speed makes every rank's step longer by
  // about its extra device time, and every collective waits for it.
  const json hw = {{"peak_flops_bf16", 1e9},
                   {"peak_flops_fp16", 1e9},
                   {"peak_flops_fp32", 1e9},
                   {"hbm_bandwidth", 1e9},
                   {"overlap_slowdown_nvlink", 0}};
  const Played base = play(scenario(1, 4, hw));
  json slow_hw = hw;
  slow_hw["rank_speed"] = json::array({{{"rank", 3}, {"speed", 0.5}}});
  const Played slow = play(scenario(1, 4, slow_hw));
  EXPECT_TRUE(slow.report.simulated_all_ranks);  // a straggler forces per-rank simulation
  ASSERT_EQ(slow.timing.size(), 4u);
  // The k-th collective starts at the same moment on every member: when the straggler arrives.
  auto starts = [&](int r) {
    std::vector<double> v;
    const auto& prog = slow.programs[static_cast<size_t>(r)];
    for (size_t i = 0; i < prog.instrs.size(); ++i)
      if (prog.instrs[i].type == sim::InstrType::kCollective)
        v.push_back(slow.timing[static_cast<size_t>(r)].times[i].start);
    return v;
  };
  for (int r = 1; r < 4; ++r) EXPECT_EQ(starts(r), starts(0)) << r;
  // Rank 0's compute runs at full speed but its step takes about as long as rank 3's compute.
  const double device = base.report.last_step.compute_s;
  EXPECT_NEAR(slow.report.step_time_s, base.report.step_time_s + device, 0.02 * device);
  EXPECT_GT(slow.report.classes[0].last_step_s, 1.9 * base.report.classes[0].last_step_s);
  // The reported step (the first of the tied slowest, rank 0) waits for the straggler in
  // collectives; the walk counts rank 0's compute that overlapped the wait as waiting.
  const auto& path = slow.report.last_step.critical_path_s;
  ASSERT_EQ(slow.report.last_step_rank, 0);
  EXPECT_GT(path[static_cast<size_t>(sim::PathKind::kPeerWait)], 0.5 * device);
  double total = 0;
  for (double v : path) total += v;
  EXPECT_NEAR(total, slow.report.step_time_s, 1e-9 * total);
}

TEST(TimeModel, ReshardAfterForwardFalseWinsWhenBandwidthStarved) {
  // FSDP over 4 nodes with a slow network: keeping parameters unsharded after forward saves
  // the backward all-gathers.
  const json hw = {{"network_bus_bandwidth", 1e8}, {"network_bandwidth", 1e8}};
  const Played reshard = play(scenario(4, 2, hw, nullptr, true, "gpt2-124m", 256));
  const Played keep = play(scenario(4, 2, hw, nullptr, false, "gpt2-124m", 256));
  EXPECT_FALSE(reshard.report.out_of_memory);
  EXPECT_FALSE(keep.report.out_of_memory);
  EXPECT_LT(keep.report.step_time_s, 0.8 * reshard.report.step_time_s);
}

TEST(TimeModel, HsdpBeatsFsdpAcrossSlowInterNodeLinks) {
  // A small model on 2 nodes x 8 over a slow network: HSDP keeps all-gathers and
  // reduce-scatters on NVLink and all-reduces gradients across nodes once per step.
  const json hw = {{"network_bus_bandwidth", 1e9}, {"network_bandwidth", 1e9}};
  const Played fsdp = play(scenario(2, 8, hw, nullptr, nullptr, "gpt2-124m", 256));
  const Played hsdp = play(scenario(2, 8, hw, json::array({2, 8}), nullptr, "gpt2-124m", 256));
  EXPECT_LT(hsdp.report.step_time_s, 0.7 * fsdp.report.step_time_s);
}

TEST(TimeModel, ReportKeys) {
  const Played p = play(scenario(1, 8, json::object()));
  const json j = sim::report_json(p.report);
  EXPECT_EQ(j["time_model"], "nccl+roofline");
  for (const char* k :
       {"step_time_s", "exposed_comm_s", "comm_s", "compute_s", "tokens_per_s_per_gpu", "mfu"})
    EXPECT_TRUE(j.contains(k)) << k;
  const json& ls = j["last_step"];
  for (const char* k : {"rank", "step_time_s", "compute_s", "comm_s", "exposed_comm_s",
                        "stream_busy_s", "critical_path_s"})
    EXPECT_TRUE(ls.contains(k)) << k;
  EXPECT_EQ(ls["step_time_s"].get<double>(), j["step_time_s"].get<double>());
  for (const char* k :
       {"compute", "device_copy", "communication", "host_link", "cpu", "launch", "peer_wait"})
    EXPECT_TRUE(ls["critical_path_s"].contains(k)) << k;
  EXPECT_TRUE(ls["stream_busy_s"].contains("all_gather"));
  EXPECT_TRUE(j["rank_classes"][0].contains("comm_s"));
}

}  // namespace
}  // namespace fullshard
