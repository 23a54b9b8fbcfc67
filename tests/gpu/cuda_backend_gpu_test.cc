// GPU tests of CudaBackend through the shared runner (runner::run_rank), on the GPU scenarios
// tools/gpu-check.sh uses:
//  - the simulator's predicted peak allocated and reserved bytes equal the measured ones to the
//    byte (1 rank over NCCL, classic and expandable segments; 2 ranks as threads sharing one GPU
//    over staged Gloo, per rank);
//  - the 1-rank CUDA run's losses equal the CPU backend's for the same scenario within the bf16
//    tolerance of the CPU training tests (NOTE [bf16 tolerance] in
//    tests/property/cpu_training_prop_test.cc), eager and with model.implementation compile;
//  - tensor parallelism (Llama and GPT-2, dp_shard 2 x tp 2 as 4 threads sharing one GPU over
//    staged Gloo): both of the above, per rank;
//  - pipeline parallelism (pp 2, 1F1B and ZBVZeroBubble) and context parallelism (cp 2, both
//    rotate methods) as 2 threads sharing one GPU: both of the above, per rank (the last stage's
//    rank alone reports a loss).
// Exits 77 (skipped) without a GPU (gpu_test_main.h).
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/stream_set.h"
#include "core/report/key_averages.h"
#include "core/scenario/scenario.h"
#include "core/train/pipeline_program.h"
#include "runner/backend_factory.h"
#include "runner/checkpoint.h"
#include "runner/rank_runner.h"
#include "simulator/simulate.h"
#include "tests/gpu/gpu_test_main.h"
#include "tests/support/cpu_support.h"
#include "tests/support/sim_support.h"
#include "tests/support/temp_dir.h"

namespace fullshard::cuda {
namespace {

constexpr int kSteps = 4;

Scenario load(const std::string& name, int steps) {
  // tools/gpu-check.sh runs this binary from another checkout: it sets FULLSHARD_SOURCE_DIR.
  const char* env = std::getenv("FULLSHARD_SOURCE_DIR");
  const std::string root = env && *env ? env : FULLSHARD_SOURCE_DIR;
  Scenario s = load_scenario_file(root + "/scenarios/" + name);
  s.training.steps = steps;
  return s;
}

struct CudaRun {
  std::vector<runner::RankResult> ranks;
  std::vector<uint64_t> non_allocator_bytes;
};

// Every rank of `s` as a thread on its own CudaBackend (ranks beyond the visible GPUs share
// them: `transport` must then be "gloo"), over one in-process store. `base`: checkpointing.
CudaRun run_cuda(const Scenario& s, const std::string& transport,
                 const runner::RankOptions& base = {}, bool measure_streams = true) {
  const int world = s.world_size();
  auto store = std::make_shared<::gloo::rendezvous::HashStore>();
  CudaRun out;
  out.ranks.resize(static_cast<size_t>(world));
  out.non_allocator_bytes.resize(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        CudaBackendOptions o;
        o.rank = r;
        o.world_size = world;
        o.local_rank = r;
        o.local_world_size = world;
        o.allocator = s.hardware.allocator;
        o.store = store;
        o.collectives.timeout = std::chrono::seconds(60);
        o.batches = runner::batch_source(s);
        if (!base.resume_from.empty()) runner::resume_data_position(base.resume_from, s, o.batches);
        const BatchSource batches = o.batches;  // its position goes into checkpoints
        o.transport = transport;
        o.measure_streams = measure_streams;
        o.pipeline_channels = pipeline_p2p_groups(s, r);  // as tools/fullshard/backends.cc
        o.optional_streams = optional_streams_used(s.pipeline.enabled() ? s.pipeline.degree : 1,
                                                   s.context_parallel.degree);
        CudaBackend b(std::move(o));
        runner::RankOptions ro = base;
        ro.steps = s.training.steps;
        ro.batches = &batches;
        out.ranks[r] = runner::run_rank(b, s, ro);
        out.non_allocator_bytes[r] = b.non_allocator_bytes();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

void expect_predicted_equals_measured(const Scenario& s, const CudaRun& real) {
  sim::SimulateOptions so;
  so.all_ranks = true;
  sim::SimulationReport pred = sim::simulate_scenario(s, so);
  ASSERT_TRUE(pred.ok()) << testing::problems_text(pred);
  int checked = 0;
  for (const auto& c : pred.classes)
    for (int r : c.ranks) {
      const auto& rep = real.ranks.at(static_cast<size_t>(r)).report;
      EXPECT_EQ(rep.peak_allocated_bytes, c.peak_allocated_bytes) << "rank " << r;
      EXPECT_EQ(rep.peak_reserved_bytes, c.peak_reserved_bytes) << "rank " << r;
      EXPECT_GT(rep.peak_allocated_bytes, 0u);
      ++checked;
    }
  EXPECT_EQ(checked, s.world_size());
}

void expect_losses_finite(const CudaRun& real, int steps) {
  for (const auto& r : real.ranks) {
    ASSERT_EQ(r.steps.size(), static_cast<size_t>(steps));
    for (const auto& m : r.steps)
      EXPECT_TRUE(std::isfinite(m.loss)) << "rank " << r.rank << " step " << m.step;
  }
}

TEST(CudaBackend, TinyLlamaPredictedEqualsMeasured) {
  const Scenario s = load("tiny-llama-h100.json", kSteps);
  const CudaRun real = run_cuda(s, "");
  expect_losses_finite(real, kSteps);
  expect_predicted_equals_measured(s, real);
  // The CUDA context alone holds device memory outside the allocator.
  EXPECT_GT(real.non_allocator_bytes[0], 0u);
  std::printf("tiny-llama-h100: peak allocated %llu, reserved %llu, non-allocator %llu bytes\n",
              static_cast<unsigned long long>(real.ranks[0].report.peak_allocated_bytes),
              static_cast<unsigned long long>(real.ranks[0].report.peak_reserved_bytes),
              static_cast<unsigned long long>(real.non_allocator_bytes[0]));
}

TEST(CudaBackend, TinyLlamaExpandableSegmentsPredictedEqualsMeasured) {
  Scenario s = load("tiny-llama-h100.json", kSteps);
  s.hardware.allocator.expandable_segments = true;
  const CudaRun real = run_cuda(s, "");
  expect_losses_finite(real, kSteps);
  expect_predicted_equals_measured(s, real);
}

TEST(CudaBackend, TwoRanksShareOneGpuPredictedEqualsMeasured) {
  const Scenario s = load("tiny-llama-h100-2on1.json", kSteps);
  ASSERT_EQ(s.world_size(), 2);
  const CudaRun real = run_cuda(s, "gloo");
  expect_losses_finite(real, kSteps);
  expect_predicted_equals_measured(s, real);
}

// NOTE [Measured stream times on the GPU] (backends/cuda/stream_times.h): with timing events every
// step reports its compute and communication split, inside its wall time; the 2 ranks' collectives
// over staged Gloo show as communication. Without them (FULLSHARD_CUDA_STREAM_TIMES=off) there is
// none.
TEST(CudaBackend, StepTimesAreMeasuredByStream) {
  const Scenario s = load("tiny-llama-h100-2on1.json", kSteps);
  runner::RankOptions ro;
  ro.timeline_points = 100000;  // work starts too (measured timeline times)
  const CudaRun real = run_cuda(s, "gloo", ro);
  for (const auto& r : real.ranks) {
    for (const auto& m : r.steps) {
      EXPECT_GT(m.compute_s, 0.0) << "rank " << r.rank << " step " << m.step;
      EXPECT_GT(m.comm_s, 0.0) << "rank " << r.rank << " step " << m.step;
      EXPECT_LE(m.exposed_comm_s, m.comm_s + 1e-9);
      EXPECT_LE(m.compute_s, m.seconds + 1e-3)
          << "busy beyond the step's wall time: a wrong anchor";
    }
    EXPECT_GT(r.last_step.stream_busy_s[static_cast<size_t>(StreamRole::kDefault)], 0.0);
    std::printf("rank %d last step: %.3f ms wall, compute %.3f ms, comm %.3f ms, exposed %.3f ms\n",
                r.rank, 1e3 * (r.last_step.end_s - r.last_step.begin_s),
                1e3 * r.last_step.compute_s, 1e3 * r.last_step.comm_s,
                1e3 * r.last_step.exposed_comm_s);
  }
  const CudaRun off = run_cuda(s, "gloo", {}, /*measure_streams=*/false);
  for (const auto& r : off.ranks)
    for (const auto& m : r.steps) EXPECT_EQ(m.compute_s, 0.0);
}

// NOTE [Per-op times] on the GPU: every step's per-op table has its kernels' event times (more
// than 0 in all, within the step's wall time) under the same keys and calls as the CPU backend's
// table of the same scenario; without timing events the calls stay and the times are 0.
TEST(CudaBackend, PerOpTimesComeFromTheEventsAroundEachLaunch) {
  const Scenario s = load("tiny-llama-h100.json", 2);
  const CudaRun real = run_cuda(s, "");
  const testing::RealRun cpu = testing::run_real(s, 2);
  const CudaRun off = run_cuda(s, "", {}, /*measure_streams=*/false);
  for (size_t k = 0; k < 2; ++k) {
    const auto& ops = real.ranks[0].steps.at(k).ops;
    ASSERT_FALSE(ops.empty()) << "step " << k;
    double sum = 0;
    std::map<std::string, int64_t> calls, cpu_calls, off_calls;
    for (const auto& r : ops) {
      sum += r.measured_s;
      calls[key_id(r.key, r.kind)] = r.calls;
    }
    for (const auto& r : cpu.ranks[0].steps.at(k).ops) cpu_calls[key_id(r.key, r.kind)] = r.calls;
    for (const auto& r : off.ranks[0].steps.at(k).ops) {
      off_calls[key_id(r.key, r.kind)] = r.calls;
      EXPECT_EQ(r.measured_s, 0.0) << r.key;
    }
    EXPECT_GT(sum, 0.0) << "step " << k;
    EXPECT_LE(sum, real.ranks[0].steps[k].seconds) << "step " << k;
    EXPECT_EQ(calls, cpu_calls) << "step " << k;
    EXPECT_EQ(calls, off_calls) << "step " << k;
  }
}

// NOTE [CUDA vs CPU tolerance]: both backends store bf16 parameters and activations and compute
// in fp32, but sum in different orders (cuBLASLt tiles, flash-attention blocks, tree reductions
// vs the CPU kernels' loops): bf16 roundings of a few ulps (2^-8 relative) per op, as between a
// sharded and an unsharded bf16 run. The loss is compared as the CPU tests compare those:
// |cuda - cpu| <= 2e-2 (plus 2e-3 relative for the growing divergence over the steps).
TEST(CudaBackend, TinyLlamaLossesMatchCpuBackend) {
  const Scenario s = load("tiny-llama-h100.json", kSteps);
  const CudaRun cuda = run_cuda(s, "");
  const testing::RealRun cpu = testing::run_real(s, kSteps);
  ASSERT_EQ(cuda.ranks[0].steps.size(), cpu.mean_loss.size());
  for (size_t k = 0; k < cpu.mean_loss.size(); ++k) {
    const double a = cuda.ranks[0].steps[k].loss, b = cpu.mean_loss[k];
    EXPECT_NEAR(a, b, 2e-2 + 2e-3 * std::abs(b)) << "step " << k;
  }
  // Training happened: the loss moved from the fresh model's ~log(256).
  EXPECT_NEAR(cuda.ranks[0].steps.front().loss, std::log(256.0), 0.3);
  EXPECT_NE(cuda.ranks[0].steps.back().loss, cuda.ranks[0].steps.front().loss);
}

// Tensor parallelism on the CUDA backend (docs/cuda-backend.md, "Tensor parallelism"):
// FSDP 2 x tp 2 with sequence parallelism and loss parallel, four ranks
// sharing one GPU over staged Gloo (tp, shard and the flattened shard+tp groups). For Llama (the
// shipped tiny-llama-tp2-h100-4on1) and GPT-2 (its Megatron plan: vocab-parallel wte, rowwise
// biases, sequence-sharded positions) on the same mesh: predicted == measured peaks per rank, and
// every rank's losses equal the CPU backend's for that rank within NOTE [CUDA vs CPU tolerance].
TEST(CudaBackend, TensorParallelMatchesCpuBackendAndPrediction) {
  const std::string file = "tiny-llama-tp2-h100-4on1.json";
  const char* env = std::getenv("FULLSHARD_SOURCE_DIR");
  const std::string root = env && *env ? env : FULLSHARD_SOURCE_DIR;
  std::ifstream in(root + "/scenarios/" + file);
  ASSERT_TRUE(in) << file;
  nlohmann::json j = nlohmann::json::parse(in);
  for (const char* model : {"tiny-llama", "tiny-gpt2"}) {
    SCOPED_TRACE(model);
    j["model"] = model;
    Scenario s = parse_scenario(j, root + "/scenarios");
    s.training.steps = kSteps;
    ASSERT_EQ(s.world_size(), 4);
    ASSERT_EQ(s.fsdp.mesh_size("tp"), 2);
    const CudaRun cuda = run_cuda(s, "gloo");
    expect_losses_finite(cuda, kSteps);
    expect_predicted_equals_measured(s, cuda);
    const testing::RealRun cpu = testing::run_real(s, kSteps);
    for (int r = 0; r < s.world_size(); ++r) {
      const auto& a = cuda.ranks[static_cast<size_t>(r)].steps;
      const auto& b = cpu.ranks[static_cast<size_t>(r)].steps;
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < b.size(); ++k)
        EXPECT_NEAR(a[k].loss, b[k].loss, 2e-2 + 2e-3 * std::abs(b[k].loss))
            << "rank " << r << " step " << k;
    }
    // A tp group computes one loss (loss parallel all-reduces it): its ranks report the same.
    for (size_t k = 0; k < static_cast<size_t>(kSteps); ++k)
      EXPECT_EQ(cuda.ranks[0].steps[k].loss, cuda.ranks[1].steps[k].loss) << "step " << k;
    EXPECT_NEAR(cuda.ranks[0].steps.front().loss, std::log(256.0), 0.3);
    EXPECT_NE(cuda.ranks[0].steps.back().loss, cuda.ranks[0].steps.front().loss);
  }
}

// Pipeline stages (NOTE [Pipeline p2p on the CUDA backend]: staged Gloo broadcasts over each
// channel's own group here, the ranks sharing one GPU; the split RMSNorm backward under
// ZBVZeroBubble) and context parallelism's ring attention (context_parallel.cu) on
// tiny-llama-tp2-h100-4on1's model as pp 2 and as cp 2 (2 ranks sharing the GPU): predicted ==
// measured peaks per rank, and each rank's losses
// equal the CPU backend's within NOTE [CUDA vs CPU tolerance] (NaN on a pp rank without the loss,
// on both backends).
TEST(CudaBackend, PipelineAndContextParallelMatchCpuBackendAndPrediction) {
  const char* env = std::getenv("FULLSHARD_SOURCE_DIR");
  const std::string root = env && *env ? env : FULLSHARD_SOURCE_DIR;
  std::ifstream in(root + "/scenarios/tiny-llama-tp2-h100-4on1.json");
  ASSERT_TRUE(in);
  // 2 ranks: 4 thread-ranks with an optional stream each would pass the 32 hardware queues
  // (NOTE [Staged gates and hardware queues]; the backend refuses it).
  nlohmann::json base = nlohmann::json::parse(in);
  base["hardware"]["gpus_per_node"] = 2;
  std::vector<std::pair<std::string, nlohmann::json>> cases;
  for (const char* schedule : {"1F1B", "ZBVZeroBubble"}) {
    nlohmann::json j = base;
    j["fsdp"]["mesh"] = {{"shape", {2, 1}}, {"dim_names", {"pp", "dp_shard"}}};
    j["pipeline_parallel"] = {{"schedule", schedule}, {"microbatch_size", 2}};
    cases.emplace_back(std::string("pp2 ") + schedule, j);
  }
  for (const char* rotate : {"allgather", "alltoall"}) {
    nlohmann::json j = base;
    j["fsdp"]["mesh"] = {{"shape", {1, 2}}, {"dim_names", {"dp_shard", "cp"}}};
    j["context_parallel"] = {{"rotate_method", rotate}};
    cases.emplace_back(std::string("cp2 ") + rotate, j);
  }
  for (const auto& [label, j] : cases) {
    SCOPED_TRACE(label);
    Scenario s = parse_scenario(j, root + "/scenarios");
    s.training.steps = kSteps;
    const CudaRun cuda = run_cuda(s, "gloo");
    expect_predicted_equals_measured(s, cuda);
    const testing::RealRun cpu = testing::run_real(s, kSteps);
    int with_loss = 0;
    for (int r = 0; r < s.world_size(); ++r) {
      const auto& a = cuda.ranks[static_cast<size_t>(r)].steps;
      const auto& b = cpu.ranks[static_cast<size_t>(r)].steps;
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < b.size(); ++k) {
        EXPECT_EQ(std::isnan(a[k].loss), std::isnan(b[k].loss)) << "rank " << r << " step " << k;
        if (std::isnan(b[k].loss)) continue;
        EXPECT_NEAR(a[k].loss, b[k].loss, 2e-2 + 2e-3 * std::abs(b[k].loss))
            << "rank " << r << " step " << k;
        ++with_loss;
      }
    }
    EXPECT_GE(with_loss, kSteps);
  }
}

// model.implementation compile: the compiled block's fused regions
// (backends/cuda/kernels/compiled.cu) in training. Predicted == measured to the byte says they use
// no memory beyond the outputs the model declares; the losses match the CPU backend's compiled run
// as the eager ones do (NOTE [CUDA vs CPU tolerance]).
TEST(CudaBackend, CompiledBlockPredictedEqualsMeasuredAndMatchesCpu) {
  Scenario s = load("tiny-llama-h100.json", kSteps);
  s.model.implementation.compile = true;
  const CudaRun cuda = run_cuda(s, "");
  expect_losses_finite(cuda, kSteps);
  expect_predicted_equals_measured(s, cuda);
  const testing::RealRun cpu = testing::run_real(s, kSteps);
  ASSERT_EQ(cuda.ranks[0].steps.size(), cpu.mean_loss.size());
  for (size_t k = 0; k < cpu.mean_loss.size(); ++k) {
    const double a = cuda.ranks[0].steps[k].loss, b = cpu.mean_loss[k];
    EXPECT_NEAR(a, b, 2e-2 + 2e-3 * std::abs(b)) << "step " << k;
  }
  EXPECT_NE(cuda.ranks[0].steps.back().loss, cuda.ranks[0].steps.front().loss);
}

// A sharded checkpoint saved on the GPU after step 2 (copy_to_host) and loaded into a fresh
// backend (copy_from_host) continues the run: steps 3 and 4 give the uninterrupted run's losses.
TEST(CudaBackend, ResumedRunContinuesTheUninterruptedOne) {
  const CudaRun straight = run_cuda(load("tiny-llama-h100.json", kSteps), "");
  testing::TempDir dir;
  runner::RankOptions save;
  save.checkpoint_dir = dir.path();
  save.checkpoint_every = 2;
  run_cuda(load("tiny-llama-h100.json", 2), "", save);
  runner::RankOptions resume;
  resume.resume_from = dir.path() + "/step-00000002";
  const CudaRun rest = run_cuda(load("tiny-llama-h100.json", kSteps), "", resume);
  ASSERT_EQ(rest.ranks[0].steps.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const double a = rest.ranks[0].steps[k].loss, b = straight.ranks[0].steps[2 + k].loss;
    // The same kernels on the same data and parameters: equal up to cuBLASLt picking another
    // algorithm for buffers at other addresses.
    EXPECT_NEAR(a, b, 1e-5 * std::abs(b)) << "step " << 3 + k;
  }
}

}  // namespace
}  // namespace fullshard::cuda
