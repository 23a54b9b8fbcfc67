// Throughput and latency of GlooProcessGroup (ranks as threads, loopback TCP). Disabled by
// default (ctest lists them as not run); run with
//   build-gloo/bin/gloo_bandwidth_test --gtest_also_run_disabled_tests
// Figures for this machine are in docs/gloo-backend.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "tests/unit/gloo_test_support.h"

using namespace fullshard;
using namespace fullshard::gloo_test;

namespace {

// Mean seconds per call of op(rank), every rank calling it `iters` times back to back on its
// own thread (after one warm-up call).
double time_collective(int n, int iters, const std::function<void(int)>& op) {
  parallel(n, op);
  const auto t0 = Clock::now();
  parallel(n, [&](int r) {
    for (int i = 0; i < iters; ++i) op(r);
  });
  return seconds_since(t0) / iters;
}

void report(const char* what, int n, size_t bytes, double s) {
  // algbw: bytes of the full tensor / time, as nccl-tests reports it.
  std::printf("%-28s N=%d %9.3f ms  algbw %6.2f GB/s\n", what, n, s * 1e3, bytes / s / 1e9);
  std::fflush(stdout);
}

TEST(GlooBandwidth, DISABLED_LargeAndSmall) {
  for (int n : {2, 4}) {
    ThreadWorld w(n);
    auto pgs = w.make_world();
    const size_t total = 64ull << 20;    // bytes of the full (unsharded) tensor
    const size_t shard = total / n / 4;  // fp32 elements per rank
    std::vector<std::vector<float>> full(n, std::vector<float>(total / 4, 1.0f));
    std::vector<std::vector<float>> part(n, std::vector<float>(shard, 1.0f));
    const int iters = 5;
    report("all_gather fp32 (in place)", n, total, time_collective(n, iters, [&](int r) {
             pgs[r]->all_gather(full[r].data() + r * shard, full[r].data(), shard, DType::kFloat32,
                                "ag");
           }));
    report("reduce_scatter fp32 sum", n, total, time_collective(n, iters, [&](int r) {
             pgs[r]->reduce_scatter(full[r].data(), part[r].data(), shard, DType::kFloat32,
                                    ReduceOp::kSum, 1, "rs");
           }));
    std::vector<std::vector<uint16_t>> full16(n, std::vector<uint16_t>(total / 2, 0x3f80));
    std::vector<std::vector<uint16_t>> part16(n, std::vector<uint16_t>(total / 2 / n));
    report("reduce_scatter bf16 avg", n, total, time_collective(n, iters, [&](int r) {
             pgs[r]->reduce_scatter(full16[r].data(), part16[r].data(), total / 2 / n,
                                    DType::kBFloat16, ReduceOp::kAvg, 1, "rs");
           }));
    report("all_reduce fp32 sum", n, total, time_collective(n, iters, [&](int r) {
             pgs[r]->all_reduce(full[r].data(), total / 4, DType::kFloat32, ReduceOp::kSum, 1,
                                "ar");
           }));
    report("broadcast", n, total, time_collective(n, iters, [&](int r) {
             pgs[r]->broadcast(full[r].data(), total / 4, DType::kFloat32, 0, "bc");
           }));
    std::vector<float> one(n, 1.0f);
    report("all_reduce 4 B", n, 4, time_collective(n, 200, [&](int r) {
             pgs[r]->all_reduce(&one[r], 1, DType::kFloat32, ReduceOp::kSum, 1, "ar");
           }));
    report("barrier", n, 0, time_collective(n, 200, [&](int r) { pgs[r]->barrier("b"); }));
  }
}

}  // namespace
